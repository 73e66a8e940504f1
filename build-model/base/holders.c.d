build-model/base/holders.c.o: base/holders.c base/io.h base/log.h \
 base/table.h
base/io.h:
base/log.h:
base/table.h:
