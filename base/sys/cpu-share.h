/* How many threads a program should use by default when a recipe runs many
 * copies of it at once (issue 12).
 *
 * Kaldi's scripts start nj jobs together on one machine (run.pl); a program
 * that takes every core in each of 16 jobs oversubscribes the machine 16
 * times (measured on the H200 host: our compile-train-graphs, 16 jobs of 16
 * threads, took 187 job-seconds against Kaldi's single-threaded 164). So the
 * default is this process's share of the online cores: the cores divided by
 * the number of running processes of the same executable file (this one
 * included), at least 1. An explicit thread option always wins. */
#ifndef KIO_CPU_SHARE_H
#define KIO_CPU_SHARE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Online cores (at least 1). */
int kio_cpu_count(void);
/* Running processes whose executable is the same file as this process's
 * (same device and inode; this process counted; processes we may not
 * inspect are not counted). At least 1. */
int kio_cpu_instances(void);
/* max(1, cores / instances), at most max_threads (if > 0). */
int kio_cpu_share(int max_threads);

#ifdef __cplusplus
}
#endif
#endif
