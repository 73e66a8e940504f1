build-model/base/topology.c.o: base/topology.c base/io.h base/log.h \
 base/model.h
base/io.h:
base/log.h:
base/model.h:
