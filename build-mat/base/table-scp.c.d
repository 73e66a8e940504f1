build-mat/base/table-scp.c.o: base/table-scp.c base/io-internal.h \
 base/io.h base/log.h base/table-internal.h base/table.h
base/io-internal.h:
base/io.h:
base/log.h:
base/table-internal.h:
base/table.h:
