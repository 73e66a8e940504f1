build-mat/base/table-ra.c.o: base/table-ra.c base/io-internal.h base/io.h \
 base/log.h base/table-internal.h base/table.h
base/io-internal.h:
base/io.h:
base/log.h:
base/table-internal.h:
base/table.h:
