build-equal/tests/check_equal.c.o: tests/check_equal.c \
 tests/../base/fst.h tests/../base/table.h tests/../base/log.h \
 tests/../base/matrix.h tests/../base/table.h \
 tests/../gpu-align/gpu-align.h tests/../gpu-align/../base/fst.h \
 tests/../gpu-align/../base/matrix.h tests/../gpu-align/../base/model.h \
 tests/test-util.h
tests/../base/fst.h:
tests/../base/table.h:
tests/../base/log.h:
tests/../base/matrix.h:
tests/../base/table.h:
tests/../gpu-align/gpu-align.h:
tests/../gpu-align/../base/fst.h:
tests/../gpu-align/../base/matrix.h:
tests/../gpu-align/../base/model.h:
tests/test-util.h:
