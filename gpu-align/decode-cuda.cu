/* The FasterDecoder of viterbi-core.h on the device: one thread per
 * utterance over a whole batch, graphs packed into flat CSR arrays, each
 * utterance's workspace carved from one allocation, best path and alignment
 * written on the device. An utterance whose workspace overflows is decoded
 * again on the device with a larger one; if that overflows too (or its
 * likelihoods were invalid) it is handed back to the caller for a CPU redo.
 * The retry pass (--retry-beam) of an utterance that reached no final state
 * runs on host threads by default (align-retry.h), beside the next batch. */
#include <stdlib.h>
#include <string.h>

#include "align-cuda-impl.h"
#include "viterbi-core.h"
#include "align-retry.h"
#include "base/sys/settings.h"


/* Per utterance, device side. Offsets index the packed arrays. */
typedef struct {
  int64_t as_off;   /* arc_start: num_states + 1 entries (utterance-local arc indices) */
  int64_t st_off;   /* final: num_states entries */
  int64_t arc_off;  /* arcs, arc_pdf */
  int64_t ws_off;   /* bytes into the workspace allocation */
  int64_t band_off; /* margin band: band_lo/band_hi entries (num_frames + 1); -1: none */
  int32_t num_states, start;
  int32_t tok_cap, stack_cap;
} galign_cu_dutt;

/* Per utterance result. need: 1 tokens, 2 stack, 4 states/hash. */
typedef struct {
  int32_t status, ok, retried, need;
  float like, score;
  int32_t stat_max_toks;
  int32_t hash_size;  /* Kaldi's hash size at the end (what a host retry starts with) */
  int64_t stat_frames, stat_toks;
} galign_cu_dres;

typedef struct {
  const galign_cu_dutt *dutt;
  const galign_cu_utt *lutt;
  const int32_t *order;     /* utterance of each thread */
  int32_t count;
  const int32_t *arc_start;
  const float *final;
  const kio_arc *arcs;
  const int32_t *arc_pdf;
  const int32_t *topo_pos;  /* margin bands (align-margin.h): per state, */
  const int32_t *band_lo, *band_hi;  /* per frame of the banded utterances */
  const float *ll;
  char *ws;
  int32_t *ali;
  float *per_frame;         /* NULL: not wanted */
  galign_cu_dres *res;
  float beam, retry_beam, ac_scale;
  int host_retry;           /* retries of unbanded utterances left to the host */
} galign_cu_dec_args;

struct galign_cu_dec {
  galign_cu_buf h_pack, d_pack;  /* dutt, order, arc_start, final, arcs, arc_pdf */
  galign_cu_buf d_ws;
  galign_cu_buf d_ali, h_ali, d_pf, h_pf;
  galign_cu_buf d_res, h_res;
  galign_retry_pool *retry;  /* host retries (NULL until the first) */
  float retry_beam, retry_acs;  /* the pool's */
};

#define GALIGN_AL16(x) (((size_t)(x) + 15) & ~(size_t)15)

/* Workspace bytes for one utterance (host and device agree on the layout). */
__host__ __device__ static inline size_t galign_ws_bytes(int32_t S, int32_t tok_cap,
                                                         int32_t stack_cap) {
  int32_t hc = galign_core_hash_cap(S);
  return GALIGN_AL16((size_t)tok_cap * sizeof(galign_tok)) +
         2 * GALIGN_AL16((size_t)S * sizeof(galign_elem)) +
         2 * GALIGN_AL16((size_t)S * sizeof(int32_t)) + GALIGN_AL16((size_t)hc * sizeof(int32_t)) +
         GALIGN_AL16((size_t)stack_cap * sizeof(int32_t));
}

__device__ static void galign_d_carve(galign_core_ws *w, char *p, int32_t S, int32_t tok_cap,
                                      int32_t stack_cap) {
  memset(w, 0, sizeof *w);
  w->tok = (galign_tok *)p;               p += GALIGN_AL16((size_t)tok_cap * sizeof(galign_tok));
  w->pool[0] = (galign_elem *)p;          p += GALIGN_AL16((size_t)S * sizeof(galign_elem));
  w->pool[1] = (galign_elem *)p;          p += GALIGN_AL16((size_t)S * sizeof(galign_elem));
  w->state_elem = (int32_t *)p;           p += GALIGN_AL16((size_t)S * sizeof(int32_t));
  w->used_bucket = (int32_t *)p;          p += GALIGN_AL16((size_t)S * sizeof(int32_t));
  w->bucket_last = (int32_t *)p;          p += GALIGN_AL16((size_t)galign_core_hash_cap(S) * sizeof(int32_t));
  w->stack = (int32_t *)p;
  w->tok_cap = tok_cap;
  w->state_cap = S;
  w->hash_cap = galign_core_hash_cap(S);
  w->stack_cap = stack_cap;
}

/* One thread per utterance: retry (unless left to the host) and best path
 * included (AlignUtteranceWrapper).
 * Blocks of at most one warp (galign_dec_block picks the size) spread the
 * utterances over all SMs; (32, 1) lets ptxas keep the core's state in
 * registers (98, no spills) instead of 64 + spills. */
__global__ void __launch_bounds__(32, 1) galign_k_decode(galign_cu_dec_args a) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= a.count) return;
  const int32_t u = a.order[j];
  const galign_cu_dutt d = a.dutt[u];
  const galign_cu_utt l = a.lutt[u];
  galign_core_graph g;
  g.num_states = d.num_states;
  g.start = d.start;
  g.n_used = l.npu;
  g.arc_start = a.arc_start + d.as_off;
  g.arcs = a.arcs + d.arc_off;
  g.final = a.final + d.st_off;
  g.arc_pdf = a.arc_pdf + d.arc_off;
  g.topo_pos = g.band_lo = g.band_hi = NULL;
  if (d.band_off >= 0) {
    g.topo_pos = a.topo_pos + d.st_off;
    g.band_lo = a.band_lo + d.band_off;
    g.band_hi = a.band_hi + d.band_off;
  }
  galign_core_ws w;
  galign_d_carve(&w, a.ws + d.ws_off, d.num_states, d.tok_cap, d.stack_cap);
  galign_core_ws_reset(&w);
  galign_core_out out = {0, 0.0f, 0.0f};
  int retried = 0;
  /* a banded utterance retries here: a failure inside its band goes to the
   * CPU path's full search, which the host retry does not do */
  const float rb = a.host_retry && d.band_off < 0 ? 0.0f : a.retry_beam;
  int st = galign_core_align(&w, &g, a.ll + l.ll_off, l.num_frames, a.beam, rb,
                             a.ac_scale, a.ali + l.frame_off,
                             a.per_frame ? a.per_frame + l.frame_off : NULL, &out, &retried);
  galign_cu_dres r;
  r.status = st;
  r.ok = st == GALIGN_CORE_OK ? out.ok : 0;
  r.retried = retried;
  r.need = (w.need_tok ? 1 : 0) | (w.need_stack ? 2 : 0) | (w.need_state || w.need_hash ? 4 : 0);
  r.like = st == GALIGN_CORE_OK ? out.like : 0.0f;
  r.score = st == GALIGN_CORE_OK ? out.score : 0.0f;
  r.stat_max_toks = w.stat_max_toks;
  r.hash_size = (int32_t)w.hash_size;
  r.stat_frames = w.stat_frames;
  r.stat_toks = w.stat_toks;
  a.res[u] = r;
}

int galign_cu_dec_new(galign_cuda *c) {
  c->dec = (struct galign_cu_dec *)calloc(1, sizeof(struct galign_cu_dec));
  if (!c->dec) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  /* No shared memory used: give the threads' scattered workspaces all of L1.
   * Only a hint, so a refusal is not an error. */
  /* $KALDI_GPU_DEV_DEC_CARVEOUT=default leaves the driver's choice (measuring
   * switch: with all of L1 the SMs running the decoder cannot take another
   * kernel's shared-memory blocks, e.g. the one-pass accumulator's). */
  static const char *const carveouts[] = {"max-l1", "default", NULL};
  if (kio_setting_choice(KIO_SET_DEV_DEC_CARVEOUT, carveouts, 0) == 1) return KIO_OK;
  cudaError_t e = cudaFuncSetAttribute((const void *)galign_k_decode, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       (int)cudaSharedmemCarveoutMaxL1);
  if (e != cudaSuccess) {
    cudaGetLastError();
    KIO_VLOG(1, "cudaFuncSetAttribute (decoder L1 carveout): %s", cudaGetErrorString(e));
  }
  return KIO_OK;
}

void galign_cu_dec_free(galign_cuda *c) {
  struct galign_cu_dec *d = c->dec;
  if (!d) return;
  galign_cu_buf *dev[] = {&d->d_pack, &d->d_ws, &d->d_ali, &d->d_pf, &d->d_res};
  galign_cu_buf *host[] = {&d->h_pack, &d->h_ali, &d->h_pf, &d->h_res};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) galign_cu_dev_release(dev[i]);
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) galign_cu_host_release(host[i]);
  galign_retry_free(d->retry);
  free(d);
  c->dec = NULL;
}

/* Layout of the packed graph buffer (byte offsets of each section). */
typedef struct {
  size_t dutt, order, arc_start, final, arcs, arc_pdf, topo, band_lo, band_hi, total;
} galign_pack_layout;

static int galign_cmp_len_desc(const void *x, const void *y, void *ctx) {
  const galign_cu_utt *u = (const galign_cu_utt *)ctx;
  int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
  if (u[a].num_frames != u[b].num_frames) return u[a].num_frames > u[b].num_frames ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* Tokens per frame reserved on the first pass ($KALDI_GPU_DEV_TOKS_PER_FRAME):
 * an overflow only costs a second device pass for that utterance. The token
 * arena of a pass holds ~25 tokens per frame at beam 10 on the fixtures and
 * up to ~110 on noisy ones with the retry beam 40 (2 KB per frame). */
static int64_t galign_toks_per_frame(void) {
  return kio_setting_int(KIO_SET_DEV_TOKS_PER_FRAME, 128, 1, 1 << 20);
}

/* Threads (utterances) per block of the decoder for m utterances. The
 * threads of a warp run different utterances and diverge, and the kernel is
 * bound by memory latency, not by issue slots: fewer threads per block means
 * less divergence and more independent warps, spread over all SMs. So the
 * block is as small as gives ~24 blocks per SM (a power of 2, 1..32);
 * measured on an H200, this beats 32-thread blocks by 1.3-2x end to end
 * (docs/benchmarks.md). $KALDI_GPU_DEV_DEC_BLOCK forces a size. */
static int galign_dec_block(const galign_cuda *c, int32_t m) {
  int forced = (int)kio_setting_int(KIO_SET_DEV_DEC_BLOCK, 0, 1, 32);
  if (forced > 0) return forced;
  const int64_t want = (int64_t)(c->num_sms > 0 ? c->num_sms : 1) * 24;
  int b = 1;
  while (b < 32 && (int64_t)b * want < m) b *= 2;
  return b;
}

static int32_t galign_clamp_cap(int64_t v) {
  const int64_t mx = (int64_t)1 << 30;
  return (int32_t)(v < 1 ? 1 : v > mx ? mx : v);
}

/* Packs graphs (validated) into pinned memory, with the utterances to decode
 * (longest first) and their workspace offsets. KIO_ERR after an ERROR. */
static int galign_pack(galign_cuda *c, int n, const galign_graph *const *graphs,
                       galign_pack_layout *L, int32_t *num_active, int64_t *ws_total) {
  struct galign_cu_dec *D = c->dec;
  const galign_cu_utt *utt = (const galign_cu_utt *)c->h_utt.p;
  int64_t ns = 0, na = 0, nb = 0;
  for (int i = 0; i < n; i++) {
    ns += graphs[i]->fst.num_states;
    na += graphs[i]->fst.num_arcs;
    if (graphs[i]->band_T > 0 && graphs[i]->band_T == utt[i].num_frames)
      nb += (int64_t)graphs[i]->band_T + 1;
  }
  L->dutt = 0;
  L->order = GALIGN_AL16(sizeof(galign_cu_dutt) * n);
  L->arc_start = L->order + GALIGN_AL16(sizeof(int32_t) * n);
  L->final = L->arc_start + GALIGN_AL16(sizeof(int32_t) * (ns + n));
  L->arcs = L->final + GALIGN_AL16(sizeof(float) * ns);
  L->arc_pdf = L->arcs + GALIGN_AL16(sizeof(kio_arc) * na);
  L->topo = L->arc_pdf + GALIGN_AL16(sizeof(int32_t) * na);
  L->band_lo = L->topo + (nb ? GALIGN_AL16(sizeof(int32_t) * ns) : 0);
  L->band_hi = L->band_lo + GALIGN_AL16(sizeof(int32_t) * nb);
  L->total = L->band_hi + GALIGN_AL16(sizeof(int32_t) * nb);
  if (galign_cu_host_reserve(&D->h_pack, L->total) != KIO_OK) return KIO_ERR;
  char *base = (char *)D->h_pack.p;
  galign_cu_dutt *du = (galign_cu_dutt *)(base + L->dutt);
  int32_t *order = (int32_t *)(base + L->order);
  int32_t *as = (int32_t *)(base + L->arc_start);
  float *fin = (float *)(base + L->final);
  kio_arc *arcs = (kio_arc *)(base + L->arcs);
  int32_t *apdf = (int32_t *)(base + L->arc_pdf);
  int32_t *topo = (int32_t *)(base + L->topo);
  int32_t *blo = (int32_t *)(base + L->band_lo), *bhi = (int32_t *)(base + L->band_hi);
  int64_t so = 0, ao = 0, wo = 0, bo = 0;
  int32_t m = 0;
  const int64_t tpf = galign_toks_per_frame();
  for (int i = 0; i < n; i++) {
    const galign_graph *gr = graphs[i];
    const kio_fst *f = &gr->fst;
    const int32_t S = f->num_states, A = f->num_arcs;
    galign_cu_dutt *d = &du[i];
    d->as_off = so + i;
    d->st_off = so;
    d->arc_off = ao;
    d->num_states = S;
    d->start = f->start;
    d->tok_cap = galign_clamp_cap((int64_t)utt[i].num_frames * tpf + 1024);
    d->stack_cap = galign_clamp_cap(2 * (int64_t)S + 64);
    d->ws_off = wo;
    d->band_off = -1;
    if (nb && S > 0 && gr->band_T > 0 && gr->band_T == utt[i].num_frames) {
      const int32_t T1 = gr->band_T + 1;
      memcpy(topo + so, gr->topo_pos, sizeof(int32_t) * (size_t)S);
      memcpy(blo + bo, gr->band_lo, sizeof(int32_t) * (size_t)T1);
      memcpy(bhi + bo, gr->band_hi, sizeof(int32_t) * (size_t)T1);
      d->band_off = bo;
      bo += T1;
    }
    /* the same test as galign_cu_decode_batch and galign_regrow use */
    int active = S > 0 && f->start >= 0 && utt[i].num_frames > 0;
    if (S > 0) {
      if (f->arc_start[0] != 0 || f->arc_start[S] != A || f->start >= S) {
        KIO_ERROR("Malformed graph (arc index or start state)");
        return KIO_ERR;
      }
      memcpy(as + so + i, f->arc_start, sizeof(int32_t) * ((size_t)S + 1));
      memcpy(fin + so, f->final, sizeof(float) * (size_t)S);
      memcpy(arcs + ao, f->arcs, sizeof(kio_arc) * (size_t)A);
      memcpy(apdf + ao, gr->arc_pdf, sizeof(int32_t) * (size_t)A);
      /* The kernel trusts indices: check them here, where it is cheap. */
      for (int32_t s = 0; s < S; s++)
        if (f->arc_start[s + 1] < f->arc_start[s]) {
          KIO_ERROR("Malformed graph (arc index)");
          return KIO_ERR;
        }
      for (int32_t a = 0; a < A; a++) {
        const kio_arc *x = &f->arcs[a];
        int32_t k = gr->arc_pdf[a];
        if (x->nextstate < 0 || x->nextstate >= S ||
            (x->ilabel != 0 && (k < 0 || k >= gr->num_pdfs_used))) {
          KIO_ERROR("Malformed graph (arc %d: next state %d, pdf index %d)", (int)a,
                    (int)x->nextstate, (int)k);
          return KIO_ERR;
        }
      }
    } else {
      as[so + i] = 0;
    }
    if (active) {
      order[m++] = i;
      wo += (int64_t)galign_ws_bytes(S, d->tok_cap, d->stack_cap);
    }
    so += S;
    ao += A;
  }
  /* Longest first: threads of a warp get similar lengths. */
  qsort_r(order, (size_t)m, sizeof(int32_t), galign_cmp_len_desc, (void *)utt);
  *num_active = m;
  *ws_total = wo;
  return KIO_OK;
}

/* Device bytes the decoder workspaces may take now: what the aligner's
 * budget has left, plus the workspace buffer itself (re-reserved). */
static int64_t galign_ws_budget(const galign_cuda *c) {
  return (int64_t)(kio_gpu_acct_room(c->acct) + c->dec->d_ws.cap);
}

size_t galign_cu_utt_bytes(const galign_cuda *c, const galign_graph *g, int32_t T) {
  const size_t t = T > 0 ? (size_t)T : 0, S = (size_t)g->fst.num_states;
  const size_t A = (size_t)g->fst.num_arcs, U = (size_t)g->num_pdfs_used;
  const size_t tiles = (t + GALIGN_LL_TILE - 1) / GALIGN_LL_TILE;
  const int band = g->band_T > 0 && g->band_T == T;
  size_t b = t * (size_t)c->dim * sizeof(float) + t * U * sizeof(float); /* features, likelihoods */
  b += 2 * U * sizeof(int32_t) + tiles * 4 * sizeof(int32_t);              /* pdf maps, tiles */
  if (band) b += tiles * U * sizeof(int32_t);                             /* band's tile pdfs */
  b += sizeof(galign_cu_dutt) + sizeof(int32_t) + (2 * S + 1) * sizeof(int32_t) +
       A * (sizeof(kio_arc) + sizeof(int32_t)) + 10 * 16;                 /* packed graph */
  if (band) b += (S + 2 * (t + 1)) * sizeof(int32_t);
  const int32_t S32 = g->fst.num_states > 0 ? g->fst.num_states : 1;
  b += galign_ws_bytes(S32, galign_clamp_cap((int64_t)T * galign_toks_per_frame() + 1024),
                       galign_clamp_cap(2 * (int64_t)S32 + 64));          /* decoder workspace */
  b += 2 * t * sizeof(int32_t) + sizeof(galign_cu_dres) + sizeof(galign_cu_utt) + sizeof(int);
  return b + b / 4;  /* the buffers grow with a quarter of slack */
}

size_t galign_cu_batch_held(const galign_cuda *c) {
  const struct galign_cu_dec *d = c->dec;
  size_t s = c->d_feats.cap + c->d_utt.cap + c->d_sel.cap + c->d_ucol.cap + c->d_wsel.cap +
             c->d_xexp.cap + c->d_lg.cap + c->d_ll.cap + c->d_uflags.cap + c->d_tiles.cap +
             c->d_tsel.cap;
  if (d) s += d->d_pack.cap + d->d_ws.cap + d->d_ali.cap + d->d_pf.cap + d->d_res.cap;
  return s;
}

void galign_cu_dec_trim(galign_cuda *c) {
  struct galign_cu_dec *d = c->dec;
  kio_cuda_stream_wait(c->stream);
  cudaGetLastError();
  galign_cu_buf *dev[] = {&c->d_feats, &c->d_utt, &c->d_sel, &c->d_ucol, &c->d_wsel, &c->d_xexp,
                          &c->d_lg, &c->d_ll, &c->d_uflags, &c->d_tiles, &c->d_tsel};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) galign_cu_dev_release(dev[i]);
  if (d) {
    galign_cu_buf *ddev[] = {&d->d_pack, &d->d_ws, &d->d_ali, &d->d_pf, &d->d_res};
    for (size_t i = 0; i < sizeof ddev / sizeof ddev[0]; i++) galign_cu_dev_release(ddev[i]);
  }
  kio_cuda_stream_wait(c->stream);  /* the frees are stream-ordered */
  cudaGetLastError();
}

/* Launches the decoder over order[0..m) (in the packed dutt/order on the
 * device), copies results, alignments (and per-frame values) back, syncs. */
static int galign_run_pass(galign_cuda *c, int n, const galign_pack_layout *L, int32_t m,
                           int64_t ws_bytes, int want_pf) {
  struct galign_cu_dec *D = c->dec;
  cudaStream_t st = c->stream;
  const int64_t TF = c->total_frames;
  if (galign_cu_dev_reserve(&D->d_ws, (size_t)ws_bytes + 16) != KIO_OK) return KIO_ERR;
  char *dp = (char *)D->d_pack.p;
  galign_cu_dec_args a;
  a.dutt = (const galign_cu_dutt *)(dp + L->dutt);
  a.lutt = (const galign_cu_utt *)c->d_utt.p;
  a.order = (const int32_t *)(dp + L->order);
  a.count = m;
  a.arc_start = (const int32_t *)(dp + L->arc_start);
  a.final = (const float *)(dp + L->final);
  a.arcs = (const kio_arc *)(dp + L->arcs);
  a.arc_pdf = (const int32_t *)(dp + L->arc_pdf);
  a.topo_pos = (const int32_t *)(dp + L->topo);
  a.band_lo = (const int32_t *)(dp + L->band_lo);
  a.band_hi = (const int32_t *)(dp + L->band_hi);
  a.ll = (const float *)c->d_ll.p;
  a.ws = (char *)D->d_ws.p;
  a.ali = (int32_t *)D->d_ali.p;
  a.per_frame = want_pf ? (float *)D->d_pf.p : NULL;
  a.res = (galign_cu_dres *)D->d_res.p;
  a.beam = c->opts.beam;
  a.retry_beam = c->opts.retry_beam;
  a.ac_scale = c->opts.acoustic_scale;
  a.host_retry = galign_retry_on_host();
  KIO_CUDA_TRY(cudaEventRecord(c->ev[2], st));
  if (m > 0) {
    const int bs = galign_dec_block(c, m);
    GALIGN_LAUNCH(galign_k_decode, (unsigned)((m + bs - 1) / bs), bs, st, a);
    KIO_CUDA_LAUNCHED();
  }
  KIO_CUDA_TRY(cudaEventRecord(c->ev[3], st));
  KIO_CUDA_TRY(cudaMemcpyAsync(D->h_res.p, D->d_res.p, sizeof(galign_cu_dres) * n,
                               cudaMemcpyDeviceToHost, st));
  if (TF > 0) {
    KIO_CUDA_TRY(cudaMemcpyAsync(D->h_ali.p, D->d_ali.p, sizeof(int32_t) * TF,
                                 cudaMemcpyDeviceToHost, st));
    if (want_pf)
      KIO_CUDA_TRY(cudaMemcpyAsync(D->h_pf.p, D->d_pf.p, sizeof(float) * TF,
                                   cudaMemcpyDeviceToHost, st));
  }
  KIO_CUDA_TRY(kio_cuda_stream_wait(st));
  return galign_cu_accum_times(c, 1);
}

/* Second device pass for utterances whose workspace overflowed: larger
 * capacities where they ran out. Those that do not fit stay NOSPACE. */
static int galign_regrow(galign_cuda *c, int n, const galign_pack_layout *L, int want_pf) {
  struct galign_cu_dec *D = c->dec;
  char *base = (char *)D->h_pack.p;
  galign_cu_dutt *du = (galign_cu_dutt *)(base + L->dutt);
  int32_t *order = (int32_t *)(base + L->order);
  const galign_cu_dres *res = (const galign_cu_dres *)D->h_res.p;
  const galign_cu_utt *utt = (const galign_cu_utt *)c->h_utt.p;
  const int *uf = (const int *)c->h_uflags.p;
  const int64_t budget = galign_ws_budget(c);
  int32_t m = 0;
  int64_t wo = 0;
  for (int i = 0; i < n; i++) {
    galign_cu_dutt *d = &du[i];
    int active = d->num_states > 0 && d->start >= 0 && utt[i].num_frames > 0;
    if (!active || uf[i] || res[i].status != GALIGN_CORE_NOSPACE || (res[i].need & 4)) continue;
    int32_t tok = d->tok_cap, stk = d->stack_cap;
    if (res[i].need & 1) {
      int64_t t = (int64_t)tok * 16;
      int64_t floor_t = (int64_t)utt[i].num_frames * 1024 + 4096;
      tok = galign_clamp_cap(t > floor_t ? t : floor_t);
    }
    if (res[i].need & 2) stk = galign_clamp_cap((int64_t)stk * 16);
    int64_t b = (int64_t)galign_ws_bytes(d->num_states, tok, stk);
    if (wo + b > budget) continue; /* left NOSPACE: CPU redo */
    d->tok_cap = tok;
    d->stack_cap = stk;
    d->ws_off = wo;
    wo += b;
    order[m++] = i;
  }
  if (m == 0) return KIO_OK;
  KIO_VLOG(1, "Decoding %d utterance(s) again on the device with larger workspaces", (int)m);
  c->stat_regrow += m;
  /* only dutt and order changed: upload those two sections */
  KIO_CUDA_TRY(cudaMemcpyAsync(D->d_pack.p, D->h_pack.p, L->arc_start, cudaMemcpyHostToDevice,
                               c->stream));
  /* The second pass overwrites res of its utterances only; keep the others. */
  return galign_run_pass(c, n, L, m, wo, want_pf);
}

/* Queues the retry passes of utterances idx[0..m) of the batch (first pass
 * done, no final state reached) on the host pool, with their likelihood
 * rows copied back from the device: the next batch may overwrite them. */
static int galign_host_retries(galign_cuda *c, int m, const int *idx,
                               const galign_graph *const *graphs, int want_pf,
                               galign_result *results, uint8_t *redo) {
  struct galign_cu_dec *D = c->dec;
  if (D->retry && (D->retry_beam != c->opts.retry_beam ||
                   D->retry_acs != c->opts.acoustic_scale)) {
    galign_retry_free(D->retry);
    D->retry = NULL;
  }
  if (!D->retry) {
    if (!(D->retry = galign_retry_new(c->opts.retry_beam, c->opts.acoustic_scale)))
      return KIO_ERR;
    D->retry_beam = c->opts.retry_beam;
    D->retry_acs = c->opts.acoustic_scale;
  }
  const galign_cu_utt *utt = (const galign_cu_utt *)c->h_utt.p;
  const galign_cu_dres *res = (const galign_cu_dres *)D->h_res.p;
  float **ll = (float **)calloc((size_t)m, sizeof(float *));
  int rc = ll ? KIO_OK : KIO_ERR;
  if (!ll) KIO_ERROR("Out of memory");
  for (int k = 0; rc == KIO_OK && k < m; k++) {
    const galign_cu_utt *u = &utt[idx[k]];
    size_t cnt = (size_t)u->num_frames * (size_t)u->npu;
    if (!(ll[k] = (float *)malloc(sizeof(float) * (cnt ? cnt : 1)))) {
      KIO_ERROR("Out of memory");
      rc = KIO_ERR;
    } else if (cnt > 0 && cudaMemcpyAsync(ll[k], (const float *)c->d_ll.p + u->ll_off,
                                          sizeof(float) * cnt, cudaMemcpyDeviceToHost,
                                          c->stream) != cudaSuccess) {
      KIO_ERROR("CUDA error copying likelihoods back: %s", cudaGetErrorString(cudaGetLastError()));
      rc = KIO_ERR;
    }
  }
  if (kio_cuda_stream_wait(c->stream) != cudaSuccess && rc == KIO_OK) {
    KIO_ERROR("CUDA error: %s", cudaGetErrorString(cudaGetLastError()));
    rc = KIO_ERR;
  }
  for (int k = 0; k < m; k++) {
    if (rc != KIO_OK) {
      if (ll) free(ll[k]);
      continue;
    }
    const int i = idx[k];
    galign_retry_task t;
    t.graph = graphs[i];
    t.ll = ll[k];
    t.num_frames = utt[i].num_frames;
    t.hash_size = (uint32_t)res[i].hash_size;
    t.want_per_frame = want_pf;
    t.result = &results[i];
    t.redo = &redo[i];
    if (galign_retry_add(D->retry, &t) != KIO_OK) rc = KIO_ERR;
    else c->stat_host_retry++;
  }
  free(ll);
  return rc;
}

int galign_cu_decode_batch(galign_cuda *c, int n, const galign_graph *const *graphs,
                           int want_pf, galign_result *results, uint8_t *redo, int *num_redo) {
  struct galign_cu_dec *D = c->dec;
  if (num_redo) *num_redo = 0;
  if (n <= 0) return KIO_OK;
  galign_pack_layout L;
  int32_t m = 0;
  int64_t wsb = 0;
  /* Host packing runs while the device computes the likelihoods. */
  if (galign_pack(c, n, graphs, &L, &m, &wsb) != KIO_OK) {
    kio_cuda_stream_wait(c->stream);
    return KIO_ERR;
  }
  if (wsb > galign_ws_budget(c)) {
    /* an out-of-memory failure: the caller splits the batch */
    char what[160];
    snprintf(what, sizeof what, "decoder workspaces of %lld bytes (the aligner's budget has "
             "%lld left)", (long long)wsb, (long long)galign_ws_budget(c));
    kio_gpu_nomem_call(what, __func__, __FILE__, __LINE__);
    kio_cuda_stream_wait(c->stream);
    return KIO_ERR;
  }
  cudaStream_t st = c->stream;
  const int64_t TF = c->total_frames;
  GALIGN_CU_RESERVE(dev, D->d_pack, char, L.total);
  GALIGN_CU_RESERVE(dev, D->d_ali, int32_t, TF + 1);
  GALIGN_CU_RESERVE(host, D->h_ali, int32_t, TF + 1);
  if (want_pf) {
    GALIGN_CU_RESERVE(dev, D->d_pf, float, TF + 1);
    GALIGN_CU_RESERVE(host, D->h_pf, float, TF + 1);
  }
  GALIGN_CU_RESERVE(dev, D->d_res, galign_cu_dres, n);
  GALIGN_CU_RESERVE(host, D->h_res, galign_cu_dres, n);
  KIO_CUDA_TRY(cudaMemcpyAsync(D->d_pack.p, D->h_pack.p, L.total, cudaMemcpyHostToDevice, st));
  if (galign_run_pass(c, n, &L, m, wsb, want_pf) != KIO_OK) return KIO_ERR;
  if (galign_regrow(c, n, &L, want_pf) != KIO_OK) return KIO_ERR;

  const galign_cu_utt *utt = (const galign_cu_utt *)c->h_utt.p;
  const galign_cu_dutt *du = (const galign_cu_dutt *)((char *)D->h_pack.p + L.dutt);
  const galign_cu_dres *res = (const galign_cu_dres *)D->h_res.p;
  const int *uf = (const int *)c->h_uflags.p;
  const int32_t *h_ali = (const int32_t *)D->h_ali.p;
  const float *h_pf = (const float *)D->h_pf.p;
  const int host_retry = galign_retry_on_host() && c->opts.retry_beam != 0.0f;
  int *to_host = host_retry ? (int *)malloc(sizeof(int) * (size_t)n) : NULL;
  int nh = 0;
  if (host_retry && !to_host) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  int nr = 0;
  for (int i = 0; i < n; i++) {
    galign_result *r = &results[i];
    const int32_t T = utt[i].num_frames;
    r->ok = 0;
    r->retried = 0;
    r->band_failed = 0;
    r->num_frames = T;
    r->like = r->score = 0.0f;
    redo[i] = 0;
    int active = du[i].num_states > 0 && du[i].start >= 0 && T > 0;
    if (!active) continue;
    if (uf[i]) { /* the CPU decides whether Kaldi would have met this value */
      redo[i] = 1;
      nr++;
      c->stat_bad_like++;
      continue;
    }
    const galign_cu_dres *x = &res[i];
    if (x->status != GALIGN_CORE_OK) {
      KIO_VLOG(1, "Utterance %d of the batch: device decoder status %d (need %d): CPU redo",
               i, (int)x->status, (int)x->need);
      redo[i] = 1;
      nr++;
      continue;
    }
    c->stat_frames += x->stat_frames;
    c->stat_toks += x->stat_toks;
    if (x->stat_max_toks > c->stat_max_toks) c->stat_max_toks = x->stat_max_toks;
    if (!x->ok && du[i].band_off >= 0) {
      /* No final state inside the band: the CPU path gives it up and runs
       * the full search (counted there: result band_failed). */
      redo[i] = 1;
      nr++;
      continue;
    }
    if (!x->ok && host_retry && du[i].band_off < 0) {
      to_host[nh++] = i;  /* its first pass only: the retry goes to the host */
      continue;
    }
    r->retried = x->retried;
    if (!x->ok) continue;
    int32_t *ali = (int32_t *)realloc(r->ali, sizeof(int32_t) * (size_t)T);
    if (!ali) {
      free(to_host);
      KIO_ERROR("Out of memory");
      return KIO_ERR;
    }
    r->ali = ali;
    memcpy(ali, h_ali + utt[i].frame_off, sizeof(int32_t) * (size_t)T);
    if (want_pf) {
      float *pf = (float *)realloc(r->per_frame, sizeof(float) * (size_t)T);
      if (!pf) {
        free(to_host);
        KIO_ERROR("Out of memory");
        return KIO_ERR;
      }
      r->per_frame = pf;
      memcpy(pf, h_pf + utt[i].frame_off, sizeof(float) * (size_t)T);
    }
    r->ok = 1;
    r->like = x->like;
    r->score = x->score;
  }
  c->stat_redo += nr;
  if (num_redo) *num_redo = nr;
  int rc = nh > 0 ? galign_host_retries(c, nh, to_host, graphs, want_pf, results, redo) : KIO_OK;
  free(to_host);
  return rc;
}

void galign_cu_retry_wait(galign_cuda *c, int *num_redo) {
  struct galign_cu_dec *D = c->dec;
  if (!D || !D->retry) return;
  int64_t redo = 0;
  double busy = 0;
  galign_retry_wait(D->retry, &c->stat_frames, &c->stat_toks, &c->stat_max_toks, &redo, &busy);
  c->stat_redo += redo;
  c->t_retry += busy;
  if (num_redo) *num_redo += (int)redo;
}
