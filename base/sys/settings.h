/* Every environment variable the project reads, in one table.
 *
 * Each row: the identifier (KIO_SET_<ID>), the variable's name, an earlier
 * name still read (NULL: none), who it is for, and one line of help.
 *   USER      documented for users; the prefix is always KALDI_GPU_.
 *   DEV       developers' measuring and debugging switches (KALDI_GPU_DEV_);
 *             documented in docs/settings.md, never needed for correct runs.
 *   TEST      test hooks: read only by test builds (kio_test_hook); shipped
 *             programs never see them.
 *   EXTERNAL  not ours: variables other tools define that we honour as they
 *             do (the thread counts OpenBLAS reads, XDG_RUNTIME_DIR, ...).
 * The table is read once, at the first call (thread-safe); an earlier name
 * is honoured with one WARNING saying the new one. Values that do not parse
 * give one WARNING naming the variable and the value, and the default.
 * docs/settings.md is generated from this table (make settings-doc). */
#ifndef KIO_SETTINGS_H
#define KIO_SETTINGS_H

#ifdef __cplusplus
extern "C" {
#endif

#define KIO_SETTINGS(X)                                                                    \
  /* ---- users ---- */                                                                    \
  X(SERVICE, "KALDI_GPU_SERVICE", NULL, USER,                                              \
    "Use the per-user GPU service: yes (default) or no (0): every job on its own context") \
  X(SERVICE_DIR, "KALDI_GPU_SERVICE_DIR", NULL, USER,                                      \
    "Directory of the service's socket (default $XDG_RUNTIME_DIR/kaldi-gpu, else "         \
    "/tmp/kaldi-gpu-UID); private to the user (0700)")                                     \
  X(SERVICE_BIN, "KALDI_GPU_SERVICE_BIN", NULL, USER,                                      \
    "The service program to start (default: kaldi-gpu-service beside the running program, " \
    "else beside libkaldi-gpu-align.so or in its ../bin)")                                  \
  X(SERVICE_IDLE, "KALDI_GPU_SERVICE_IDLE", NULL, USER,                                    \
    "Seconds the service stays up without clients (default 60)")                           \
  X(SERVICE_VERBOSE, "KALDI_GPU_SERVICE_VERBOSE", NULL, USER,                              \
    "The service's own log verbosity, as --verbose (default 0)")                           \
  X(SERVICE_TIMEOUT, "KALDI_GPU_SERVICE_TIMEOUT", NULL, USER,                              \
    "Seconds a job waits without a sign of life from the service (it sends one every "     \
    "second while it works) before the job goes on by itself (default 30)")                \
  X(DEVICE, "KALDI_GPU_DEVICE", "KIO_CUDA_DEVICE", USER,                                   \
    "CUDA device number to use (default: the least busy; CUDA_VISIBLE_DEVICES applies "    \
    "first)")                                                                              \
  X(MARGIN, "KALDI_GPU_MARGIN", NULL, USER,                                                \
    "Margin mode for unchanged recipes: frames of band around the alignment the output "   \
    "replaces (default off)")                                                              \
  X(BLAS_PROFILE, "KALDI_GPU_BLAS_PROFILE", "KIO_BLAS_PROFILE", USER,                      \
    "Round as Kaldi linked with this OpenBLAS kernel family (skx, cpl, hsw, snb, nhm, sse, or "  \
    "an OpenBLAS core name); default: matched to the Kaldi in use")                        \
  X(FEATS_PIPE, "KALDI_GPU_FEATS_PIPE", "KIO_FEATS_PIPE", USER,                            \
    "0: run the recipes' feature pipelines (and gmm-acc-mllt's posteriors pipe) as real "  \
    "pipes instead of in-process")                                                         \
  X(FEATS_GPU, "KALDI_GPU_FEATS_GPU", "KIO_FEATS_GPU", USER,                               \
    "1: compute delta/LDA/fMLLR feature chains on the device (gmm-align-compiled, own "    \
    "context; default 0)")                                                                 \
  X(FEATS_THREADS, "KALDI_GPU_FEATS_THREADS", "KIO_FEATS_THREADS", USER,                   \
    "Threads of the in-process feature chain, and of a feature-cache hit's check and "     \
    "copies (default: this job's share of the cores)")                                     \
  X(FEATS_CACHE, "KALDI_GPU_FEATS_CACHE", NULL, USER,                                      \
    "Folder of the in-process feature chains' cache (the output of chains with a "         \
    "transform-feats stage kept for the next iterations; default: featcache in the "       \
    "private directory), or 0: no cache")                                                  \
  X(FEATS_CACHE_MAX, "KALDI_GPU_FEATS_CACHE_MAX", NULL, USER,                              \
    "The feature cache's size: bytes with K/M/G (default: the smaller of 20% of the "      \
    "memory and half the folder's free space); least recently used entries go first")     \
  X(CPU_THREADS, "KALDI_GPU_CPU_THREADS", "GALIGN_CPU_THREADS", USER,                      \
    "Threads of the CPU aligner (default: this job's share of the cores, at most 16)")     \
  X(GUNZIP_PIPE, "KALDI_GPU_GUNZIP_PIPE", "KIO_GUNZIP_PIPE", USER,                         \
    "1: run 'gunzip -c FILE|' inputs as real pipes instead of in-process zlib")            \
  X(CUBLAS, "KALDI_GPU_CUBLAS", NULL, USER,                                                \
    "Path of the libcublas.so.N (or its folder) to load if the GPU path needs cuBLAS "     \
    "(libcublasLt from there first; default: one already loaded, else the toolkit's)")     \
  X(LIBRARY, "KALDI_GPU_LIBRARY", NULL, USER,                                              \
    "The Python binding: path of the libkaldi-gpu-align.so to load (default: the "        \
    "package's own, else the system's)")                                                   \
  X(GPU_MEMORY, "KALDI_GPU_MEMORY", NULL, USER,                                            \
    "Device memory one job may use, as --gpu-memory: bytes with K/M/G, or a percentage "   \
    "of the device (default 2G, at most 1/8 of the device; docs/gpu-memory.md)")           \
  X(SERVICE_MEMORY, "KALDI_GPU_SERVICE_MEMORY", NULL, USER,                                \
    "Device memory the GPU service may use per device for all its jobs (default 12G, at "  \
    "most 1/4 of the device and what was free at its start)")                              \
  X(GPU_WAIT, "KALDI_GPU_WAIT", NULL, USER,                                                \
    "Seconds a job waits for a busy device (--use-gpu=wait) or for device memory "         \
    "(wait, yes) before the CPU (wait) or an error (yes) (default 300)")                   \
  /* ---- developers ---- */                                                               \
  X(DEV_CUDA_SYNC, "KALDI_GPU_DEV_CUDA_SYNC", "KIO_CUDA_SYNC", DEV,                        \
    "1: synchronise and check after every kernel launch")                                  \
  X(DEV_NO_SIMD, "KALDI_GPU_DEV_NO_SIMD", "KIO_NO_SIMD", DEV,                              \
    "1: scalar code only on the CPU (the vector paths' oracle)")                           \
  X(DEV_SIMD_MAX, "KALDI_GPU_DEV_SIMD_MAX", "KIO_SIMD_MAX", DEV,                           \
    "Highest CPU vector level used: avx2 or avx512")                                       \
  X(DEV_FEATS_BLAS_THREADS, "KALDI_GPU_DEV_FEATS_BLAS_THREADS", "KIO_FEATS_BLAS_THREADS",  \
    DEV, "Threads of transform-feats' product (default: as OpenBLAS would use)")           \
  X(DEV_LONG_FRAMES, "KALDI_GPU_DEV_LONG_FRAMES", "GALIGN_GPU_LONG_FRAMES", DEV,           \
    "Frames above which a GPU run aligns an utterance on host threads with chunked "       \
    "device likelihoods (default 6000)")                                                   \
  X(DEV_CHUNK_FRAMES, "KALDI_GPU_DEV_CHUNK_FRAMES", "GALIGN_GPU_CHUNK_FRAMES", DEV,        \
    "Frames of one likelihood chunk of a long utterance")                                  \
  X(DEV_BATCH_FRAMES, "KALDI_GPU_DEV_BATCH_FRAMES", "KIO_GALIGN_BATCH_FRAMES", DEV,        \
    "Frames of one device likelihood batch")                                               \
  X(DEV_LIKELIHOODS, "KALDI_GPU_DEV_LIKELIHOODS", "KIO_GALIGN_LL", DEV,                    \
    "Likelihood kernel: exact (default) or gemm (cuBLAS)")                                 \
  X(DEV_MARGIN_LIKELIHOODS, "KALDI_GPU_DEV_MARGIN_LIKELIHOODS", "KIO_GALIGN_MARGIN_LL",    \
    DEV, "Margin mode's likelihoods: banded or full")                                      \
  X(DEV_DEC_BLOCK, "KALDI_GPU_DEV_DEC_BLOCK", "KIO_GALIGN_DEC_BLOCK", DEV,                 \
    "Threads per block of the device decoder (default: sized to the batch)")               \
  X(DEV_DEC_CARVEOUT, "KALDI_GPU_DEV_DEC_CARVEOUT", "KIO_GALIGN_DEC_CARVEOUT", DEV,        \
    "default: no L1 carve-out hint for the decoder")                                       \
  X(DEV_TOKS_PER_FRAME, "KALDI_GPU_DEV_TOKS_PER_FRAME", "KIO_GALIGN_TOKS_PER_FRAME", DEV,  \
    "Initial device decoder tokens per frame")                                             \
  X(DEV_RETRY, "KALDI_GPU_DEV_RETRY", NULL, DEV,                                           \
    "Where the device decoder's retry passes (--retry-beam) run: host (default: host "    \
    "threads, beside the next batch) or device (the utterance's GPU thread)")             \
  X(DEV_RETRY_THREADS, "KALDI_GPU_DEV_RETRY_THREADS", NULL, DEV,                           \
    "Host threads of a device aligner for the retry passes, 1 to 16 (default 4)")         \
  X(DEV_ACC_STREAM_PRIORITY, "KALDI_GPU_DEV_ACC_STREAM_PRIORITY",                          \
    "KIO_GACC_STREAM_PRIORITY", DEV, "high: the accumulator's stream at high priority")    \
  X(DEV_SERVICE_SYNC, "KALDI_GPU_DEV_SERVICE_SYNC", NULL, DEV,                             \
    "spin: the GPU service waits for the device spinning, not blocking (measuring)")      \
  X(DEV_SERVICE_SPIN_US, "KALDI_GPU_DEV_SERVICE_SPIN_US", NULL, DEV,                       \
    "Microseconds a wait of the GPU service polls the device before it sleeps (default "  \
    "1000; 0: sleep at once)")                                                              \
  X(DEV_HOST_CACHE_MB, "KALDI_GPU_DEV_HOST_CACHE_MB", NULL, DEV,                           \
    "MiB of freed large (over 32 MiB) page-locked host blocks kept for reuse (default "   \
    "4096)")                                                                                \
  X(DEV_HOST_RESERVE_MB, "KALDI_GPU_DEV_HOST_RESERVE_MB", NULL, DEV,                       \
    "MiB of page-locked host memory the GPU service pins ahead while its devices are "    \
    "idle and keeps while it runs (default 4096, at most a sixteenth of the host's "      \
    "memory; 0: pin only on demand)")                                                     \
  X(DEV_SERVICE_STUCK_S, "KALDI_GPU_DEV_SERVICE_STUCK_S", NULL, DEV,                       \
    "Seconds a GPU service connection may work on requests without answering any before " \
    "its heartbeats stop, so that its job gives up on it after its timeout and goes on "  \
    "by itself (default 180; 0: no limit)")                                               \
  X(DEV_SERVICE_INFLIGHT, "KALDI_GPU_DEV_SERVICE_INFLIGHT", NULL, DEV,                     \
    "Alignment requests a job keeps unanswered on a GPU service connection, 1 to 3 "      \
    "(default 2: the next batch sent ahead; 1: one at a time)")                           \
  X(DEV_SERVICE_ACC_INFLIGHT, "KALDI_GPU_DEV_SERVICE_ACC_INFLIGHT", NULL, DEV,             \
    "Accumulation requests gmm-acc-stats-ali keeps unanswered on its GPU service "        \
    "connection, 1 or 2 (default 2: the next batch sent while the service accumulates "   \
    "the one before; 1: one at a time)")                                                  \
  X(DEV_SERVICE_REQUEST_KB, "KALDI_GPU_DEV_SERVICE_REQUEST_KB", NULL, DEV,                 \
    "A batch goes to the GPU service in requests of about this many KiB (default "        \
    "1048576: one request per batch, the next batch sent ahead)")                          \
  X(DEV_SERVICE_BALANCE, "KALDI_GPU_DEV_SERVICE_BALANCE", NULL, DEV,                       \
    "With --num-gpus above 1: 0 (default) equal shares of each batch; 1 moves frames "    \
    "away from a connection whose replies come later (its device also accumulates, or "    \
    "is slower; measured slower than equal shares on two H200s)")                          \
  X(DEV_ACC_STATS, "KALDI_GPU_DEV_ACC_STATS", NULL, DEV,                                   \
    "Device statistics kernel: cells (default: a pdf's cells over many blocks) or tiled "  \
    "(one block per pdf); the same bits")                                                  \
  X(DEV_ACC_HOST_THREADS, "KALDI_GPU_DEV_ACC_HOST_THREADS", NULL, DEV,                     \
    "Threads of the device accumulator's per-frame host work and of gmm-acc-mllt's "       \
    "statistics (default: this job's share of the cores, at most 16, less those of the "   \
    "process's other accumulators); the same bits whatever the number")                    \
  X(DEV_TRAIN_ACC_STREAMS, "KALDI_GPU_DEV_TRAIN_ACC_STREAMS", NULL, DEV,                   \
    "gmm-train-gpu on the GPU: device accumulators (a stream and host threads each) that " \
    "accumulate the jobs side by side, 1 to 16 (default 4; 1: the jobs one after the "     \
    "other on one accumulator); each job's statistics the same bits whatever the number")  \
  X(DEV_TRAIN_WRITER_NICE, "KALDI_GPU_DEV_TRAIN_WRITER_NICE", NULL, DEV,                   \
    "gmm-train-gpu: niceness added to the fsts.JOB.gz writers (thread and gzip), 0 to 19 " \
    "(default 10: the graph compilation first, the writers in the cycles it leaves; 0: "   \
    "as the compilation)")                                                                 \
  X(DEV_TRAIN_GRAPHS_NICE, "KALDI_GPU_DEV_TRAIN_GRAPHS_NICE", NULL, DEV,                   \
    "gmm-train-gpu: niceness added to the training graphs' compilation when it runs "      \
    "beside the first iterations, 0 to 19 (default 5: the iterations' threads first); "    \
    "the fsts.JOB.gz writers add theirs to it")                                            \
  X(DEV_TRAIN_GRAPHS_BESIDE, "KALDI_GPU_DEV_TRAIN_GRAPHS_BESIDE", NULL, DEV,               \
    "gmm-train-gpu: 0 compiles the training graphs before the first iteration; default "  \
    "1: beside the iterations before the first realignment, which wait for them (the "     \
    "same graphs, files and log lines)")                                                   \
  X(DEV_TRAIN_SUM, "KALDI_GPU_DEV_TRAIN_SUM", NULL, DEV,                                   \
    "gmm-train-gpu on the GPU: where the jobs' statistics are summed, 1 (default) on the " \
    "device (each job's statistics stay there, only the sum is fetched) or 0 on the host " \
    "(every job's fetched, summed in the glob's order); the same bits")                    \
  X(DEV_TRAIN_GRAPHS_AT_MODEL, "KALDI_GPU_DEV_TRAIN_GRAPHS_AT_MODEL", NULL, DEV,         \
    "gmm-train-gpu with --start-after (steps-gpu/train_deltas.sh's early start): 0 starts "\
    "the training graphs when the script says go; default 1: when it says model (its "    \
    "tree and first model written, before convert-ali), beside the alignments' "           \
    "conversion; jobs compiled before go keep their log lines and graphs in memory and "   \
    "their compile_graphs.JOB.log and fsts.JOB.gz are made at go (the same files and "     \
    "lines), none if the script stops (a failing convert-ali)")                            \
  X(DEV_BLAS_CACHE, "KALDI_GPU_DEV_BLAS_CACHE", NULL, DEV,                               \
    "0: find the Kaldi's OpenBLAS core anew in every process (two short child processes) " \
    "instead of the answer kept in the private directory for the same program, library "  \
    "and environment")                                                                     \
  X(DEV_READ_THREADS, "KALDI_GPU_DEV_READ_THREADS", NULL, DEV,                           \
    "Threads reading the feature archive ahead (a regular file) in gmm-acc-stats-ali and " \
    "the aligning programs, and the aligning programs' graph archive (a regular file of " \
    "binary graphs; with 3 threads or more) (default: this job's share of the cores, at "  \
    "most 8; 0: read as without it)")                                                     \
  X(DEV_GRAPHS_NO_TUNE, "KALDI_GPU_DEV_GRAPHS_NO_TUNE", "TGRAPH_NO_TUNE", DEV,             \
    "1: compile-train-graphs keeps glibc's malloc settings")                               \
  /* ---- test hooks (test builds only) ---- */                                            \
  X(TEST_SERVICE_FORCE, "KALDI_GPU_TEST_SERVICE_FORCE", NULL, TEST,                       \
    "1: use the service even without a GPU device node")                                   \
  X(TEST_CPU_TOK_START, "KALDI_GPU_TEST_CPU_TOK_START", "GALIGN_CPU_TOK_START", TEST,      \
    "The CPU decoder's initial token arena (the long-utterance paths on short data)")      \
  X(TEST_CPU_LL_CACHE, "KALDI_GPU_TEST_CPU_LL_CACHE", "GALIGN_CPU_LL_CACHE", TEST,         \
    "Likelihood cache entries of the CPU aligner's retry pass")                            \
  X(TEST_SERVICE_CPU, "KALDI_GPU_TEST_SERVICE_CPU", "KALDI_GPU_SERVICE_CPU", TEST,         \
    "The service and its clients on the CPU backend as if there were N devices")           \
  X(TEST_SERVICE_DROP, "KALDI_GPU_TEST_SERVICE_DROP", "KALDI_GPU_SERVICE_TEST_DROP", TEST, \
    "The service drops a connection after N batches")                                     \
  X(TEST_SERVICE_SHM, "KALDI_GPU_TEST_SERVICE_SHM", NULL, TEST,                            \
    "The least bytes of an alignment request's arrays (graphs and features) or an "        \
    "accumulation request's features that go through shared memory (0: none)")            \
  X(TEST_SERVICE_BAD_OFFSET, "KALDI_GPU_TEST_SERVICE_BAD_OFFSET", NULL, TEST,              \
    "The job's first alignment request through shared memory gives its first utterance's "  \
    "array N (1 arc_start .. 5 arc_pdf, 6 the features) an offset outside the region (the " \
    "service must refuse it)")                                                              \
  X(TEST_SERVICE_BREAK, "KALDI_GPU_TEST_SERVICE_BREAK", NULL, TEST,                        \
    "The service's device context breaks after N batches (all connections together)")      \
  X(TEST_SERVICE_STOP, "KALDI_GPU_TEST_SERVICE_STOP", NULL, TEST,                          \
    "The service stops itself (SIGSTOP) after N batches")                                  \
  X(TEST_SERVICE_SLOW, "KALDI_GPU_TEST_SERVICE_SLOW", NULL, TEST,                          \
    "Seconds the service spends on each batch before it works on it (a busy device)")     \
  X(TEST_SERVICE_LATE, "KALDI_GPU_TEST_SERVICE_LATE", NULL, TEST,                          \
    "Seconds a job waits before it reads each alignment reply of its last GPU service "    \
    "connection (as if that device were slower; --num-gpus)")                              \
  X(TEST_SERVICE_NO_START, "KALDI_GPU_TEST_SERVICE_NO_START", NULL, TEST,                  \
    "The service never starts: exit (at once) or hang (before it listens)")                \
  X(TEST_SERVICE_START_WAIT, "KALDI_GPU_TEST_SERVICE_START_WAIT", NULL, TEST,              \
    "Seconds a job waits for a service it started to listen (default 10)")                 \
  X(TEST_HOSTNAME, "KALDI_GPU_TEST_HOSTNAME", NULL, TEST,                                  \
    "The host name in the service's identity and file names")                              \
  X(TEST_GPU_UUIDS, "KALDI_GPU_TEST_GPU_UUIDS", NULL, TEST,                                \
    "The physical GPUs (UUIDs, comma-separated) in the service's identity, without CUDA")  \
  X(TEST_ACC_KEEP_BYTES, "KALDI_GPU_TEST_ACC_KEEP_BYTES", NULL, TEST,                      \
    "Bytes of batches a job keeps to redo accumulation the service may have lost")         \
  X(TEST_FAIL_ALLOC, "KALDI_GPU_TEST_FAIL_ALLOC", NULL, TEST,                              \
    "Device allocations that fail as out of memory: N, N:K, N+ (counted from 1), >BYTES")  \
  X(TEST_MEMORY_REPORT, "KALDI_GPU_TEST_MEMORY_REPORT", NULL, TEST,                        \
    "1: device allocations, peak and bytes still held, on stderr at exit")                 \
  X(TEST_EMU_MEMORY, "KALDI_GPU_TEST_EMU_MEMORY", NULL, TEST,                              \
    "Bytes of the emulated device (tests/emu; default 8G)")                                \
  X(TEST_NO_SMALL_JOB, "KALDI_GPU_TEST_NO_SMALL_JOB", NULL, TEST,                          \
    "1: small accumulation jobs go to the GPU (or service) as large ones do")              \
  /* ---- other tools' variables, honoured as they do ---- */                              \
  X(CUDA_VISIBLE_DEVICES, "CUDA_VISIBLE_DEVICES", NULL, EXTERNAL,                         \
    "The CUDA runtime's device mask (part of the service's identity)")                     \
  X(CUDA_DEVICE_ORDER, "CUDA_DEVICE_ORDER", NULL, EXTERNAL,                               \
    "The CUDA runtime's device numbering (part of the service's identity)")                \
  X(SLURM_JOB_ID, "SLURM_JOB_ID", NULL, EXTERNAL,                                         \
    "Set in a Slurm job: the service it starts leaves the job's control groups if it may") \
  X(JOB_ID, "JOB_ID", NULL, EXTERNAL,                                                      \
    "GridEngine's job number (with SGE_ROOT: as SLURM_JOB_ID)")                            \
  X(SGE_ROOT, "SGE_ROOT", NULL, EXTERNAL, "Set under GridEngine")                          \
  X(XDG_RUNTIME_DIR, "XDG_RUNTIME_DIR", NULL, EXTERNAL,                                    \
    "The user's runtime directory (the service's socket directory)")                       \
  X(GZIP, "GZIP", NULL, EXTERNAL, "gzip's default options (the in-process gunzip)")        \
  X(OPENBLAS_NUM_THREADS, "OPENBLAS_NUM_THREADS", NULL, EXTERNAL,                          \
    "OpenBLAS's thread count (transform-feats' product, as Kaldi's)")                      \
  X(GOTO_NUM_THREADS, "GOTO_NUM_THREADS", NULL, EXTERNAL, "as OPENBLAS_NUM_THREADS")       \
  X(OMP_NUM_THREADS, "OMP_NUM_THREADS", NULL, EXTERNAL, "as OPENBLAS_NUM_THREADS")         \
  X(GLIBC_TUNABLES, "GLIBC_TUNABLES", NULL, EXTERNAL,                                      \
    "glibc's malloc settings (compile-train-graphs tunes them unless set)")                \
  X(LD_LIBRARY_PATH, "LD_LIBRARY_PATH", NULL, EXTERNAL,                                    \
    "Where the loader finds the Kaldi's libraries (part of the rounding profile's cache key)") \
  X(LD_PRELOAD, "LD_PRELOAD", NULL, EXTERNAL,                                              \
    "Libraries the loader adds (part of the rounding profile's cache key)")                \
  X(OPENBLAS_CORETYPE, "OPENBLAS_CORETYPE", NULL, EXTERNAL,                                \
    "OpenBLAS's kernels forced (part of the rounding profile's cache key)")                \
  X(PATH, "PATH", NULL, EXTERNAL,                                                          \
    "Where the Kaldi in use is looked for (its BLAS sets the rounding profile)")           \
  X(KALDI_ROOT, "KALDI_ROOT", NULL, EXTERNAL,                                              \
    "A Kaldi source tree, looked in when PATH holds no Kaldi program")

typedef enum {
#define KIO_SETTING_ID_(id, name, old, aud, help) KIO_SET_##id,
  KIO_SETTINGS(KIO_SETTING_ID_)
#undef KIO_SETTING_ID_
  KIO_SET_COUNT
} kio_setting;

typedef enum { KIO_SET_FOR_USER, KIO_SET_FOR_DEV, KIO_SET_FOR_TEST, KIO_SET_FOR_EXTERNAL } kio_setting_audience;

typedef struct {
  const char *name, *old_name, *help;
  kio_setting_audience audience;
} kio_setting_info;
const kio_setting_info *kio_setting_describe(kio_setting s);

/* The value (NULL when unset or empty). Test hooks always give NULL here:
 * use kio_test_hook. */
const char *kio_setting_str(kio_setting s);
/* An integer in [lo, hi]; def when unset; def and one WARNING when it does
 * not parse or is out of range. */
long long kio_setting_int(kio_setting s, long long def, long long lo, long long hi);
/* 1 for 1/yes/true/on, 0 for 0/no/false/off; def when unset; def and one
 * WARNING otherwise. */
int kio_setting_flag(kio_setting s, int def);
/* The index of the value in choices (NULL-terminated); def when unset; def
 * and one WARNING listing the choices otherwise. */
int kio_setting_choice(kio_setting s, const char *const *choices, int def);

/* This process's own value from now on (NULL: unset), whatever the
 * environment says; children still inherit the environment. E.g. the
 * service never hands work to a service. The value is copied; a string
 * kio_setting_str gave for s before is no longer valid. */
void kio_setting_override(kio_setting s, const char *value);

/* A test hook's value: NULL in shipped programs (base/sys/test-hooks.c);
 * test builds link tests/lib/test-hooks.c, which reads the environment. */
const char *kio_test_hook(kio_setting s);
/* The environment's value of a test hook (NULL for any other setting): what
 * the test builds' kio_test_hook returns. */
const char *kio_test_hook_lookup(kio_setting s);

#ifdef __cplusplus
}
#endif
#endif
