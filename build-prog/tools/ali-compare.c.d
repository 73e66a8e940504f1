build-prog/tools/ali-compare.c.o: tools/ali-compare.c tools/../base/log.h \
 tools/../base/options.h tools/../base/table.h
tools/../base/log.h:
tools/../base/options.h:
tools/../base/table.h:
