/* Internal to gpu-align: an ALIGN request's packing (the wire format:
 * align-remote.h). Each utterance's scalars go into the message; its arrays
 * (the graph's and the features) either by reference (sent from where they
 * are) or, with shared memory, copied into the job's region at 64-byte
 * aligned offsets that the message carries instead (align-serve.c checks
 * them against the region). */
#ifndef GALIGN_ALIGN_PACK_H
#define GALIGN_ALIGN_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "device/svc-link.h"
#include "gpu-align.h"

/* Bytes of an utterance in an ALIGN request (an upper bound, inline or
 * not): how a batch is split into requests. */
uint64_t galign_pack_utt_bytes(const galign_graph *g, const kio_matrix *f);

/* Bytes the n utterances' arrays take in a region; *graph_bytes: of them,
 * the graphs'. */
size_t galign_pack_shm_bytes(const galign_graph *const *graphs, const kio_matrix *const *feats,
                             int n, size_t *graph_bytes);

/* Puts an ALIGN request of the n utterances into m (reset first): u32 n,
 * want_per_frame, flags, seq, region, then per utterance. With map (a
 * region of shm_bytes, galign_pack_shm_bytes, the flags then holding
 * KIO_SVC_ALIGN_SHM) the arrays are copied there on the job's share of the
 * cores and the message carries their offsets; else it refers to them.
 * bad (a test hook; 0: none): with map, the first utterance's array bad - 1
 * gets an offset outside any region. KIO_ERR: out of memory (nothing
 * sent). */
int galign_pack_request(kio_msg *m, uint8_t *map, size_t shm_bytes,
                        const galign_graph *const *graphs, const kio_matrix *const *feats,
                        int n, int want_per_frame, uint32_t flags, uint32_t seq,
                        uint32_t region, int bad);

#endif
