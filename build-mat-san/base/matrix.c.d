build-mat-san/base/matrix.c.o: base/matrix.c base/matrix.h base/table.h \
 base/compressed-matrix.h base/io.h base/log.h
base/matrix.h:
base/table.h:
base/compressed-matrix.h:
base/io.h:
base/log.h:
