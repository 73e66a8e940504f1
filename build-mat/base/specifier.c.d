build-mat/base/specifier.c.o: base/specifier.c base/log.h base/table.h
base/log.h:
base/table.h:
