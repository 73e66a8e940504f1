build-equal/base/cuda-util-nocuda.c.o: base/cuda-util-nocuda.c
