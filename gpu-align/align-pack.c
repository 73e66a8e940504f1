/* An ALIGN request's packing (align-pack.h). */
#include "align-pack.h"
#include "align-shm.h"

#include <stdlib.h>

#include "base/sys/log.h"

/* The arrays of an utterance in the request's order: arc_start, arcs,
 * final, pdfs_used, arc_pdf, features, then (after band_T) topo_pos,
 * band_lo, band_hi (empty without a band). */
enum { NARR = 9, FEATS = 5 };

static int32_t band_of(const galign_graph *g, const kio_matrix *f) {
  return g->band_T == f->rows ? g->band_T : 0;
}

static void utt_arrays(const galign_graph *g, const kio_matrix *f, const void *src[NARR],
                       size_t len[NARR]) {
  const kio_fst *s = &g->fst;
  const size_t ns = (size_t)s->num_states, na = (size_t)s->num_arcs;
  const int32_t bt = band_of(g, f);
  src[0] = s->arc_start, len[0] = (ns + 1) * sizeof(int32_t);
  src[1] = s->arcs, len[1] = na * sizeof(kio_arc);
  src[2] = s->final, len[2] = ns * sizeof(float);
  src[3] = g->pdfs_used, len[3] = (size_t)g->num_pdfs_used * sizeof(int32_t);
  src[4] = g->arc_pdf, len[4] = na * sizeof(int32_t);
  src[5] = f->data, len[5] = (size_t)f->rows * (size_t)f->cols * sizeof(float);
  src[6] = g->topo_pos, len[6] = bt ? ns * sizeof(int32_t) : 0;
  src[7] = g->band_lo, len[7] = bt ? ((size_t)bt + 1) * sizeof(int32_t) : 0;
  src[8] = g->band_hi, len[8] = bt ? ((size_t)bt + 1) * sizeof(int32_t) : 0;
}

static size_t up64(size_t b) { return (b + 63) / 64 * 64; }

uint64_t galign_pack_utt_bytes(const galign_graph *g, const kio_matrix *f) {
  uint64_t ns = (uint64_t)g->fst.num_states, na = (uint64_t)g->fst.num_arcs;
  uint64_t b = 160 + 4 * (ns + 1) + sizeof(kio_arc) * na + 4 * ns + 4 * (uint64_t)g->num_pdfs_used +
               4 * na + 4 * (uint64_t)f->rows * (uint64_t)f->cols;
  if (g->band_T == f->rows) b += 4 * ns + 8 * ((uint64_t)g->band_T + 1);
  return b;
}

size_t galign_pack_shm_bytes(const galign_graph *const *graphs, const kio_matrix *const *feats,
                             int n, size_t *graph_bytes) {
  size_t all = 0, gb = 0;
  for (int i = 0; i < n; i++) {
    const void *src[NARR];
    size_t len[NARR];
    utt_arrays(graphs[i], feats[i], src, len);
    for (int k = 0; k < NARR; k++) {
      all += up64(len[k]);
      if (k != FEATS) gb += up64(len[k]);
    }
  }
  if (graph_bytes) *graph_bytes = gb;
  return all;
}

int galign_pack_request(kio_msg *m, uint8_t *map, size_t shm_bytes,
                        const galign_graph *const *graphs, const kio_matrix *const *feats,
                        int n, int want_per_frame, uint32_t flags, uint32_t seq,
                        uint32_t region, int bad) {
  kio_msg_reset(m);
  galign_shm_piece *pc = map ? malloc((size_t)(n > 0 ? n : 1) * NARR * sizeof *pc) : NULL;
  if (map && !pc) return KIO_ERR;
  int np = 0;
  size_t o = 0;
  kio_msg_put_u32(m, (uint32_t)n);
  kio_msg_put_u32(m, (uint32_t)want_per_frame);
  kio_msg_put_u32(m, flags);
  kio_msg_put_u32(m, seq);
  kio_msg_put_u32(m, region);
  for (int i = 0; i < n; i++) {
    const galign_graph *g = graphs[i];
    const kio_fst *f = &g->fst;
    kio_msg_put_i32(m, f->num_states);
    kio_msg_put_i32(m, f->num_arcs);
    kio_msg_put_i32(m, f->start);
    kio_msg_put_i32(m, g->num_pdfs_used);
    kio_msg_put_i32(m, feats[i]->rows);
    kio_msg_put_i32(m, feats[i]->cols);
    const void *src[NARR];
    size_t len[NARR];
    utt_arrays(g, feats[i], src, len);
    static const size_t elem[NARR] = {sizeof(int32_t), sizeof(kio_arc), sizeof(float),
                                      sizeof(int32_t), sizeof(int32_t), sizeof(float),
                                      sizeof(int32_t), sizeof(int32_t), sizeof(int32_t)};
    for (int k = 0; k < NARR; k++) {
      if (k == 6) kio_msg_put_i32(m, band_of(g, feats[i]));
      if (!map) {
        kio_msg_put_ref(m, src[k], len[k] / elem[k], elem[k]);
        continue;
      }
      /* the offset of the array in the region, the copy below */
      kio_msg_put_u64(m, i == 0 && k == bad - 1 ? UINT64_MAX - 63 : o);
      if (len[k]) pc[np++] = (galign_shm_piece){src[k], o, len[k]};
      o += up64(len[k]);
    }
  }
  if (map) galign_shm_fill_pieces(map, pc, np, shm_bytes);
  free(pc);
  return KIO_OK;
}
