/* Internals of the device layer shared by gpu.c and gpu-mem.c. */
#ifndef KIO_GPU_INTERNAL_H
#define KIO_GPU_INTERNAL_H

#include <stddef.h>
#include "gpu.h"

/* The table of live device blocks: which account holds each and how many
 * bytes, so that kio_gpu_free needs only the pointer. */
int kio_gpu_blocks_add(void *p, size_t bytes, kio_gpu_acct *a);
/* Removes p's entry: KIO_OK and its bytes and account, or KIO_ERR. */
int kio_gpu_blocks_take(void *p, size_t *bytes, kio_gpu_acct **a);
/* The account goes away: its blocks left (a leak, reported in test builds
 * under KALDI_GPU_TEST_MEMORY_REPORT) are detached from it. */
void kio_gpu_blocks_forget(kio_gpu_acct *a);
/* KALDI_GPU_TEST_FAIL_ALLOC (test builds): 1 if this allocation attempt
 * must fail as if the device were out of memory. */
int kio_gpu_hook_fails(size_t bytes);

#endif
