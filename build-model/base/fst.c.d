build-model/base/fst.c.o: base/fst.c base/fst-bridge.h base/fst.h \
 base/table.h base/log.h
base/fst-bridge.h:
base/fst.h:
base/table.h:
base/log.h:
