build-mat/base/compressed-matrix.c.o: base/compressed-matrix.c \
 base/compressed-matrix.h base/matrix.h base/table.h base/io.h base/log.h
base/compressed-matrix.h:
base/matrix.h:
base/table.h:
base/io.h:
base/log.h:
