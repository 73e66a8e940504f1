build-model/tests/check_model.c.o: tests/check_model.c tests/../base/io.h \
 tests/../base/log.h tests/../base/model.h tests/test-util.h
tests/../base/io.h:
tests/../base/log.h:
tests/../base/model.h:
tests/test-util.h:
