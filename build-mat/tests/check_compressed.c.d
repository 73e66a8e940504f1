build-mat/tests/check_compressed.c.o: tests/check_compressed.c \
 tests/../base/io.h tests/../base/log.h tests/../base/matrix.h \
 tests/../base/table.h tests/test-util.h
tests/../base/io.h:
tests/../base/log.h:
tests/../base/matrix.h:
tests/../base/table.h:
tests/test-util.h:
