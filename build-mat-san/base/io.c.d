build-mat-san/base/io.c.o: base/io.c base/io.h base/io-internal.h \
 base/log.h base/table.h
base/io.h:
base/io-internal.h:
base/log.h:
base/table.h:
