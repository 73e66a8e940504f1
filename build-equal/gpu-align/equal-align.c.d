build-equal/gpu-align/equal-align.c.o: gpu-align/equal-align.c \
 gpu-align/gpu-align.h gpu-align/../base/fst.h gpu-align/../base/table.h \
 gpu-align/../base/matrix.h gpu-align/../base/model.h \
 gpu-align/../base/log.h
gpu-align/gpu-align.h:
gpu-align/../base/fst.h:
gpu-align/../base/table.h:
gpu-align/../base/matrix.h:
gpu-align/../base/model.h:
gpu-align/../base/log.h:
