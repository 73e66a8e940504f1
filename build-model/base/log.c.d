build-model/base/log.c.o: base/log.c base/log.h
base/log.h:
