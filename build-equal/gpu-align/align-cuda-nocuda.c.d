build-equal/gpu-align/align-cuda-nocuda.c.o: \
 gpu-align/align-cuda-nocuda.c
