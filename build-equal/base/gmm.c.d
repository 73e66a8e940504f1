build-equal/base/gmm.c.o: base/gmm.c base/io.h base/log.h base/matrix.h \
 base/table.h base/model.h
base/io.h:
base/log.h:
base/matrix.h:
base/table.h:
base/model.h:
