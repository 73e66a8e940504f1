build-prog/gmmbin-gpu/gmm-align-compiled.c.o: \
 gmmbin-gpu/gmm-align-compiled.c gmmbin-gpu/../base/fst.h \
 gmmbin-gpu/../base/table.h gmmbin-gpu/../base/log.h \
 gmmbin-gpu/../base/matrix.h gmmbin-gpu/../base/model.h \
 gmmbin-gpu/../base/options.h gmmbin-gpu/../base/table.h \
 gmmbin-gpu/../gpu-align/gpu-align.h \
 gmmbin-gpu/../gpu-align/../base/fst.h \
 gmmbin-gpu/../gpu-align/../base/matrix.h \
 gmmbin-gpu/../gpu-align/../base/model.h
gmmbin-gpu/../base/fst.h:
gmmbin-gpu/../base/table.h:
gmmbin-gpu/../base/log.h:
gmmbin-gpu/../base/matrix.h:
gmmbin-gpu/../base/model.h:
gmmbin-gpu/../base/options.h:
gmmbin-gpu/../base/table.h:
gmmbin-gpu/../gpu-align/gpu-align.h:
gmmbin-gpu/../gpu-align/../base/fst.h:
gmmbin-gpu/../gpu-align/../base/matrix.h:
gmmbin-gpu/../gpu-align/../base/model.h:
