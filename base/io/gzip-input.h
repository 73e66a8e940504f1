/* Internal to base/: "gunzip -c PATH |" input pipes decompressed in-process
 * with zlib (gzip-input.c), called from io.c's input_open_raw. The stream
 * gives exactly the bytes the pipe would, prints gzip 1.12's messages and
 * reports gunzip's exit status as a wait status, as pclose would. */
#ifndef KIO_GZIP_INPUT_H
#define KIO_GZIP_INPUT_H

#include <stdio.h>

typedef struct kio_gzip kio_gzip;

/* cmd: the rxfilename without its trailing '|'. When cmd is exactly
 * "gunzip -c PATH", "gzip -cd PATH", "gzip -dc PATH" or "zcat PATH" (runs of
 * spaces, PATH of [A-Za-z0-9._/+,:=@%-] not starting with '-'), PATH is a
 * readable regular file starting with a gzip magic number, and neither
 * KALDI_GPU_GUNZIP_PIPE=1 nor GZIP is in the environment, returns a read-only
 * FILE* decompressing PATH in a producer thread and sets *g. Otherwise
 * returns NULL (the caller popens cmd, so gunzip prints its own message). */
FILE *kio_gzip_open(const char *cmd, kio_gzip **g);

/* Decompresses the already open fd (taken over; closed at the end, also on
 * failure) as "gunzip -c NAME" would, writing gzip's messages to err_fd
 * (-1: none), without the checks of kio_gzip_open (a non-gzip start gives
 * "not in gzip format"). NULL on failure. For kio_gzip_open and fuzzing. */
FILE *kio_gzip_fdopen(int fd, const char *name, int err_fd, kio_gzip **g);

/* Closes f (from kio_gzip_open/fdopen), stops and joins the thread, frees g.
 * Returns the wait status gunzip would have had: 0, 1 << 8 (error),
 * 2 << 8 (trailing garbage warning), or (128 + SIGPIPE) << 8 when the
 * reader closed before the whole output was produced (what popen gave for a
 * gunzip killed by SIGPIPE under /bin/sh = dash). */
int kio_gzip_close(kio_gzip *g, FILE *f);

/* 1 if cmd has one of the recognised forms; sets *path to its PATH
 * (malloc'd). Exposed for tests. */
int kio_gzip_parse_cmd(const char *cmd, char **path);

#endif
