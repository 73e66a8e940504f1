/* What every program of gmmbin-gpu does at start, above the whole of base/:
 * the in-process stand-ins for the recipes' input pipes are installed here
 * (the I/O layer only knows them through kio_input_set_pipe_provider); and
 * a program run as the BLAS core query answers it and exits
 * (base/matrix/blas-profile.h). */
#ifndef KIO_PROGRAM_H
#define KIO_PROGRAM_H

#ifdef __cplusplus
extern "C" {
#endif

/* First call of every program's main. */
void kio_program_start(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
