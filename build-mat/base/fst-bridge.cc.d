build-mat/base/fst-bridge.cc.o: base/fst-bridge.cc base/fst-bridge.h \
 base/fst.h base/table.h base/log.h
base/fst-bridge.h:
base/fst.h:
base/table.h:
base/log.h:
