build-mat/base/table-read.c.o: base/table-read.c base/io-internal.h \
 base/io.h base/log.h base/table-internal.h base/table.h
base/io-internal.h:
base/io.h:
base/log.h:
base/table-internal.h:
base/table.h:
