build-prog/tools/replicate-archive.c.o: tools/replicate-archive.c \
 tools/../base/fst.h tools/../base/table.h tools/../base/log.h \
 tools/../base/matrix.h tools/../base/options.h tools/../base/table.h
tools/../base/fst.h:
tools/../base/table.h:
tools/../base/log.h:
tools/../base/matrix.h:
tools/../base/options.h:
tools/../base/table.h:
