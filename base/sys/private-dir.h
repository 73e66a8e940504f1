/* This user's private directory on this host (the GPU service's socket
 * directory: KALDI_GPU_SERVICE_DIR, else $XDG_RUNTIME_DIR/kaldi-gpu, else
 * /tmp/kaldi-gpu-UID; created 0700, refused when another user's or open to
 * others) and the small-file helpers of the caches kept there. */
#ifndef KIO_PRIVATE_DIR_H
#define KIO_PRIVATE_DIR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The directory (absolute) into dir; 0, or -1 with why. */
int kio_private_dir(char *dir, size_t n, char *why, size_t why_len);
/* A whole small file into buf (NUL-terminated); its length, -1 if unreadable. */
int kio_read_small(const char *path, char *buf, size_t n);
/* Replaces path's content at once (a reader sees the old or the new). */
void kio_write_atomic(const char *path, const char *text);
/* FNV-1a over p, continuing h (start: KIO_FNV_START). */
uint64_t kio_fnv1a(uint64_t h, const void *p, size_t n);
#define KIO_FNV_START 1469598103934665603ull

#ifdef __cplusplus
}
#endif
#endif
