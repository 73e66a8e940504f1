build-mat-san/base/transition-model.c.o: base/transition-model.c \
 base/io.h base/log.h base/matrix.h base/table.h base/model.h
base/io.h:
base/log.h:
base/matrix.h:
base/table.h:
base/model.h:
