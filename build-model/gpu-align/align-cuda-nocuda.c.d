build-model/gpu-align/align-cuda-nocuda.c.o: \
 gpu-align/align-cuda-nocuda.c
