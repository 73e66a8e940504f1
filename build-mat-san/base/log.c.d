build-mat-san/base/log.c.o: base/log.c base/log.h
base/log.h:
