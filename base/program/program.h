/* What every program of gmmbin-gpu (and the tools that mirror Kaldi's
 * programs) does at start and how it leaves, above the whole of base/:
 *
 *   int main(int argc, char **argv) {
 *     kio_program_start(argc, argv);
 *     kio_opts *po = kio_opts_new(usage);
 *     ... options registered on po ...
 *     kio_program_args(po, argc, argv, 4, 5);   exits unless the program goes on
 *     ... the work; a failure (its ERROR logged): kio_fatal_exit() (255) ...
 *     return num_done != 0 ? 0 : 1;             Kaldi's programs' own end
 *   }
 *
 * kio_program_start installs the in-process stand-ins for the recipes' input
 * pipes (the I/O layer only knows them through kio_input_set_pipe_provider),
 * and a program run as the BLAS core query answers it and exits
 * (base/matrix/blas-profile.h). */
#ifndef KIO_PROGRAM_H
#define KIO_PROGRAM_H

#include "base/sys/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* First call of every program's main. */
void kio_program_start(int argc, char **argv);

/* The command line, the options registered on po: Kaldi's ParseOptions
 * (options.h), then the number of positional arguments, min_args ..
 * max_args. Returns only when the program goes on; otherwise exits with
 * Kaldi's codes: 0 after --help, 1 after the usage text (a wrong number of
 * arguments), 255 after an invalid option's ERROR (kio_fatal_exit). It
 * exits rather than returns (main's frame stays for leak checkers). */
void kio_program_parse(kio_opts *po, int argc, char **argv, int min_args, int max_args);
/* kio_program_parse, then the program's first LOG line (kio_log_ours). */
void kio_program_args(kio_opts *po, int argc, char **argv, int min_args, int max_args);
/* For a case a drop-in does not reproduce: LOG "WHY: running Kaldi's PATH
 * instead" and exec Kaldi's own program NAME (kio_find_kaldi_program) with
 * argv (argv[0] replaced); without one, or when the exec fails, an ERROR
 * and exit 255. Never returns. */
void kio_program_exec_kaldi(const char *name, char **argv, const char *why);

#ifdef __cplusplus
}
#endif
#endif
