build-equal/tests/test-util.c.o: tests/test-util.c tests/test-util.h
tests/test-util.h:
