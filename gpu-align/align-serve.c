/* Alignment through the GPU service, the service's side: the handler of an
 * ALIGN request (the wire format and the job's side: align-remote.c). The
 * request's arrays are used in place, the features in the job's shared
 * memory where the request says so (its memfds mapped read-only, sealed
 * against shrinking). */
#include "align-remote.h"
#include "align-shm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/sys/log.h"

/* The job's shared memory, per region. */
typedef struct {
  struct { const uint8_t *map; size_t len; } reg[KIO_SVC_REGIONS];
  int refs;  /* the serves sharing it (one thread) */
} serve_regions;

struct galign_serve {
  int cap, n;
  uint32_t flags, seq, want_pf;
  serve_regions *rg;
  int fd;  /* a descriptor received with the request, not mapped yet (-1) */
  galign_graph *graphs;
  const galign_graph **gptr;
  kio_matrix *feats;
  const kio_matrix **fptr;
  galign_result *res;
  kio_log_deferred *lines;
};

galign_serve *galign_serve_new_sharing(galign_serve *other) {
  galign_serve *s = calloc(1, sizeof(galign_serve));
  if (!s) return NULL;
  s->fd = -1;
  s->rg = other ? other->rg : calloc(1, sizeof *s->rg);
  if (!s->rg) {
    free(s);
    return NULL;
  }
  s->rg->refs++;
  return s;
}

galign_serve *galign_serve_new(void) { return galign_serve_new_sharing(NULL); }

void galign_serve_give_fd(galign_serve *s, int fd) {
  if (fd < 0) return;
  if (s->fd >= 0) close(s->fd);
  s->fd = fd;
}

/* Region k becomes the memfd received (sealed against shrinking, so the
 * job cannot pull pages from under the aligner). KIO_ERR if unusable. */
static int serve_map(galign_serve *s, uint32_t k) {
  int fd = s->fd;
  s->fd = -1;
  const uint8_t *p;
  size_t len;
  if (galign_shm_map_received(fd, &p, &len) != KIO_OK) return KIO_ERR;
  if (s->rg->reg[k].map) munmap((void *)s->rg->reg[k].map, s->rg->reg[k].len);
  s->rg->reg[k].map = p;
  s->rg->reg[k].len = len;
  return KIO_OK;
}

static void serve_clear_results(galign_serve *s) {
  for (int i = 0; i < s->cap; i++) galign_result_free(&s->res[i]);
  kio_log_discard(&s->lines);
}

void galign_serve_free(galign_serve *s) {
  if (!s) return;
  serve_clear_results(s);
  if (--s->rg->refs == 0) {
    for (int k = 0; k < KIO_SVC_REGIONS; k++)
      if (s->rg->reg[k].map) munmap((void *)s->rg->reg[k].map, s->rg->reg[k].len);
    free(s->rg);
  }
  if (s->fd >= 0) close(s->fd);
  free(s->graphs);
  free(s->gptr);
  free(s->feats);
  free(s->fptr);
  free(s->res);
  free(s);
}

int galign_serve_hello(kio_msg_reader *req, galign_opts *o, const void **model,
                       size_t *model_len) {
  o->beam = kio_rd_f32(req);
  o->retry_beam = kio_rd_f32(req);
  o->transition_scale = kio_rd_f32(req);
  o->self_loop_scale = kio_rd_f32(req);
  o->acoustic_scale = kio_rd_f32(req);
  o->careful = kio_rd_i32(req);
  *model = kio_rd_arr(req, 1, req->len, model_len);
  return req->bad ? KIO_ERR : KIO_OK;
}

static int grow(galign_serve *s, int n) {
  if (n <= s->cap) return KIO_OK;
  galign_graph *g = realloc(s->graphs, (size_t)n * sizeof *g);
  if (g) s->graphs = g;
  const galign_graph **gp = realloc(s->gptr, (size_t)n * sizeof *gp);
  if (gp) s->gptr = gp;
  kio_matrix *f = realloc(s->feats, (size_t)n * sizeof *f);
  if (f) s->feats = f;
  const kio_matrix **fp = realloc(s->fptr, (size_t)n * sizeof *fp);
  if (fp) s->fptr = fp;
  galign_result *r = realloc(s->res, (size_t)n * sizeof *r);
  if (r) {
    memset(r + s->cap, 0, (size_t)(n - s->cap) * sizeof *r);
    s->res = r;
  }
  if (!g || !gp || !f || !fp || !r) return KIO_ERR;
  s->cap = n;
  return KIO_OK;
}

/* The graph's arrays are consistent (what the decoder relies on). */
static int graph_ok(const galign_graph *g, int32_t num_pdfs) {
  const kio_fst *f = &g->fst;
  if (f->num_states < 1 || f->start < 0 || f->start >= f->num_states) return 0;
  if (f->arc_start[0] != 0 || f->arc_start[f->num_states] != f->num_arcs) return 0;
  for (int32_t s = 0; s < f->num_states; s++)
    if (f->arc_start[s + 1] < f->arc_start[s]) return 0;
  for (int32_t a = 0; a < f->num_arcs; a++)
    if (f->arcs[a].nextstate < 0 || f->arcs[a].nextstate >= f->num_states ||
        g->arc_pdf[a] < -1 || g->arc_pdf[a] >= g->num_pdfs_used)
      return 0;
  for (int32_t k = 0; k < g->num_pdfs_used; k++)
    if (g->pdfs_used[k] < 0 || g->pdfs_used[k] >= num_pdfs) return 0;
  return 1;
}

/* An array of the request: inline (map NULL: read from the payload, its
 * count in *count), or (shared memory) at a u64 offset into the region of
 * len bytes, count elements of size bytes: the offset 8-byte aligned and
 * the array wholly inside the region, else *count = (size_t)-1 (no count
 * matches it) and NULL. */
static const void *arr(kio_msg_reader *req, const uint8_t *map, size_t len, size_t size,
                       int64_t count, size_t *got) {
  if (!map) return kio_rd_arr(req, size, req->len, got);
  uint64_t off = kio_rd_u64(req);
  uint64_t b = count >= 0 ? (uint64_t)count * size : UINT64_MAX;
  int in = !req->bad && count >= 0 && off % 8 == 0 && off <= len && b <= len - off;
  *got = in ? (size_t)count : (size_t)-1;
  return in ? map + off : NULL;
}

int galign_serve_parse(galign_serve *s, const galign_aligner *a, kio_msg_reader *req) {
  serve_clear_results(s);
  uint32_t n = kio_rd_u32(req), want_pf = kio_rd_u32(req);
  s->n = 0;
  s->want_pf = want_pf;
  s->flags = kio_rd_u32(req);
  s->seq = kio_rd_u32(req);
  uint32_t region = kio_rd_u32(req);
  const int shm = (s->flags & KIO_SVC_ALIGN_SHM) != 0;
  if (req->bad || region >= KIO_SVC_REGIONS) return KIO_ERR;
  if (shm && s->fd >= 0 && serve_map(s, region) != KIO_OK) return KIO_ERR;
  const uint8_t *rmap = shm ? s->rg->reg[region].map : NULL;
  const size_t rlen = shm ? s->rg->reg[region].len : 0;
  if (shm && !rmap) return KIO_ERR;
  /* an utterance takes more than 64 bytes of the request: a count the
   * payload cannot hold allocates nothing */
  if (req->bad || n > req->len / 64 || grow(s, (int)n) != KIO_OK) return KIO_ERR;
  int32_t num_pdfs = galign_aligner_num_pdfs(a);
  for (uint32_t i = 0; i < n; i++) {
    galign_graph *g = &s->graphs[i];
    kio_matrix *f = &s->feats[i];
    memset(g, 0, sizeof *g);
    memset(f, 0, sizeof *f);
    int32_t ns = kio_rd_i32(req), na = kio_rd_i32(req), start = kio_rd_i32(req);
    int32_t npu = kio_rd_i32(req), rows = kio_rd_i32(req), cols = kio_rd_i32(req);
    size_t c1, c2, c3, c4, c5, c6, c7, c8, c9;
    g->fst.arc_start = (int32_t *)arr(req, rmap, rlen, sizeof(int32_t), (int64_t)ns + 1, &c1);
    g->fst.arcs = (kio_arc *)arr(req, rmap, rlen, sizeof(kio_arc), na, &c2);
    g->fst.final = (float *)arr(req, rmap, rlen, sizeof(float), ns, &c3);
    g->pdfs_used = (int32_t *)arr(req, rmap, rlen, sizeof(int32_t), npu, &c4);
    g->arc_pdf = (int32_t *)arr(req, rmap, rlen, sizeof(int32_t), na, &c5);
    f->data = (float *)arr(req, rmap, rlen, sizeof(float),
                           rows > 0 && cols > 0 ? (int64_t)rows * cols : -1, &c6);
    int32_t bt = kio_rd_i32(req);
    const int64_t nb = bt == rows && bt > 0 ? bt : 0;  /* else refused below */
    g->topo_pos = (int32_t *)arr(req, rmap, rlen, sizeof(int32_t), nb ? ns : 0, &c7);
    g->band_lo = (int32_t *)arr(req, rmap, rlen, sizeof(int32_t), nb ? nb + 1 : 0, &c8);
    g->band_hi = (int32_t *)arr(req, rmap, rlen, sizeof(int32_t), nb ? nb + 1 : 0, &c9);
    if (req->bad || ns < 1 || na < 0 || npu < 0 || rows < 1 || cols < 1 ||
        c1 != (size_t)ns + 1 || c2 != (size_t)na || c3 != (size_t)ns || c4 != (size_t)npu ||
        c5 != (size_t)na || c6 != (size_t)rows * (size_t)cols)
      return KIO_ERR;
    if (bt != 0 && (bt != rows || c7 != (size_t)ns || c8 != (size_t)bt + 1 ||
                    c9 != (size_t)bt + 1))
      return KIO_ERR;
    g->band_T = bt;
    if (!bt) g->topo_pos = g->band_lo = g->band_hi = NULL;
    g->fst.num_states = ns;
    g->fst.num_arcs = na;
    g->fst.start = start;
    g->num_pdfs_used = npu;
    if (!graph_ok(g, num_pdfs)) return KIO_ERR;
    f->rows = rows;
    f->cols = cols;
    s->gptr[i] = g;
    s->fptr[i] = f;
  }
  s->n = (int)n;
  return KIO_OK;
}

size_t galign_serve_need(const galign_serve *s, const galign_aligner *a) {
  return galign_aligner_batch_need(a, s->n, s->gptr, s->fptr);
}

void galign_serve_run(galign_serve *s, galign_aligner *a, kio_msg *reply, int *batch_rc) {
  const uint32_t n = (uint32_t)s->n, want_pf = s->want_pf;
  kio_log_defer(&s->lines);
  int rc = galign_align_batch(a, (int)n, s->gptr, s->fptr, (int)want_pf, s->res);
  kio_log_defer(NULL);
  *batch_rc = rc;
  kio_msg_reset(reply);
  kio_msg_put_i32(reply, rc);
  kio_msg_put_lines(reply, s->lines);
  if (rc != KIO_OK) return;
  for (uint32_t i = 0; i < n; i++) {
    const galign_result *r = &s->res[i];
    kio_msg_put_i32(reply, r->ok);
    kio_msg_put_i32(reply, r->retried);
    kio_msg_put_i32(reply, r->band_failed);
    kio_msg_put_i32(reply, s->feats[i].rows);
    kio_msg_put_f32(reply, r->like);
    kio_msg_put_f32(reply, r->score);
    kio_msg_put_ref(reply, r->ali, r->ok ? (size_t)s->feats[i].rows : 0, sizeof(int32_t));
    kio_msg_put_ref(reply, r->per_frame,
                    r->ok && want_pf && r->per_frame ? (size_t)s->feats[i].rows : 0,
                    sizeof(float));
  }
}

int galign_serve_align(galign_serve *s, galign_aligner *a, kio_msg_reader *req,
                       kio_msg *reply, int *batch_rc) {
  *batch_rc = KIO_OK;
  if (galign_serve_parse(s, a, req) != KIO_OK) return KIO_ERR;
  galign_serve_run(s, a, reply, batch_rc);
  return KIO_OK;
}

uint32_t galign_serve_flags(const galign_serve *s, uint32_t *seq) {
  if (seq) *seq = s->seq;
  return s->flags;
}
int galign_serve_count(const galign_serve *s) { return s->n; }
const kio_matrix *galign_serve_feats(const galign_serve *s, int i) { return &s->feats[i]; }
const galign_result *galign_serve_result(const galign_serve *s, int i) { return &s->res[i]; }
