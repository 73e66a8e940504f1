/* TransitionModel read/write and derived quantities (reference 3.2, Kaldi
 * hmm/transition-model.cc). Only topology, tuples and log-probs are stored;
 * everything else is recomputed exactly as Kaldi's ComputeDerived() and
 * ComputeDerivedOfProbs() do (float/double mix included). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "model.h"

#define TM_MAX_TUPLES (1 << 26)

void kio_tmodel_free(kio_tmodel *tm) {
  if (!tm) return;
  kio_topology_free(&tm->topo);
  free(tm->tuples);
  free(tm->log_probs);
  free(tm->first_tid);
  free(tm->tid2ts);
  free(tm->tid2pdf);
  free(tm->tid_is_self_loop);
  free(tm->nonloop_log_prob);
  memset(tm, 0, sizeof *tm);
}

static const kio_topo_state *tuple_state(const kio_tmodel *tm, const kio_tuple *t) {
  const kio_topology *tp = &tm->topo;
  if (t->phone < 0 || t->phone >= tp->num_phone2idx) return NULL;
  int32_t idx = tp->phone2idx[t->phone];
  if (idx < 0 || idx >= tp->num_entries) return NULL;
  const kio_topo_entry *e = &tp->entries[idx];
  if (t->hmm_state < 0 || t->hmm_state >= e->num_states) return NULL;
  return &e->states[t->hmm_state];
}

static int tuple_cmp(const kio_tuple *a, const kio_tuple *b) {
  if (a->phone != b->phone) return a->phone < b->phone ? -1 : 1;
  if (a->hmm_state != b->hmm_state) return a->hmm_state < b->hmm_state ? -1 : 1;
  if (a->forward_pdf != b->forward_pdf) return a->forward_pdf < b->forward_pdf ? -1 : 1;
  if (a->self_loop_pdf != b->self_loop_pdf) return a->self_loop_pdf < b->self_loop_pdf ? -1 : 1;
  return 0;
}

/* ComputeDerived(): first_tid, tid2ts, tid2pdf, self-loop flags, num_pdfs.
 * Also the checks Kaldi's Check() makes on the tuple list (strictly sorted,
 * so TupleToTransitionState is the inverse of the numbering). */
static int tm_compute_derived(kio_tmodel *tm) {
  int32_t T = tm->num_tuples;
  tm->first_tid = malloc(sizeof(int32_t) * ((size_t)T + 2));
  if (!tm->first_tid) { kio_set_error("out of memory"); return KIO_ERR; }
  tm->first_tid[0] = 0;
  int64_t cur = 1;
  tm->num_pdfs = 0;
  for (int32_t ts = 1; ts <= T + 1; ts++) {
    if (cur > INT32_MAX) { kio_set_error("TransitionModel: too many transition-ids"); return KIO_ERR; }
    tm->first_tid[ts] = (int32_t)cur;
    if (ts <= T) {
      const kio_tuple *t = &tm->tuples[ts - 1];
      const kio_topo_state *s = tuple_state(tm, t);
      if (!s) {
        kio_set_error("TransitionModel: tuple %d (phone %d, hmm-state %d) not in topology",
                      (int)ts, (int)t->phone, (int)t->hmm_state);
        return KIO_ERR;
      }
      if (t->forward_pdf < 0 || t->self_loop_pdf < 0) {
        kio_set_error("TransitionModel: negative pdf in tuple %d", (int)ts);
        return KIO_ERR;
      }
      if (ts > 1 && tuple_cmp(&tm->tuples[ts - 2], t) >= 0) {
        kio_set_error("TransitionModel: tuples not sorted and unique at %d", (int)ts);
        return KIO_ERR;
      }
      if (1 + t->forward_pdf > tm->num_pdfs) tm->num_pdfs = 1 + t->forward_pdf;
      if (1 + t->self_loop_pdf > tm->num_pdfs) tm->num_pdfs = 1 + t->self_loop_pdf;
      cur += s->num_trans;
    }
  }
  int32_t n = (int32_t)cur; /* num_tids + 1 */
  tm->num_tids = n - 1;
  tm->tid2ts = calloc((size_t)n, sizeof(int32_t));
  tm->tid2pdf = calloc((size_t)n, sizeof(int32_t));
  tm->tid_is_self_loop = calloc((size_t)n, 1);
  if (!tm->tid2ts || !tm->tid2pdf || !tm->tid_is_self_loop) {
    kio_set_error("out of memory");
    return KIO_ERR;
  }
  for (int32_t ts = 1; ts <= T; ts++) {
    const kio_tuple *t = &tm->tuples[ts - 1];
    const kio_topo_state *s = tuple_state(tm, t);
    for (int32_t tid = tm->first_tid[ts]; tid < tm->first_tid[ts + 1]; tid++) {
      int32_t idx = tid - tm->first_tid[ts];
      int loop = s->trans[idx].dest == t->hmm_state;
      tm->tid2ts[tid] = ts;
      tm->tid_is_self_loop[tid] = (uint8_t)loop;
      tm->tid2pdf[tid] = loop ? t->self_loop_pdf : t->forward_pdf;
    }
  }
  if (tm->num_tids == 0 || T == 0) {
    kio_set_error("TransitionModel: no transition-ids");
    return KIO_ERR;
  }
  return KIO_OK;
}

int32_t kio_ts_self_loop(const kio_tmodel *tm, int32_t ts) {
  if (ts < 1 || ts > tm->num_tuples) return 0;
  for (int32_t tid = tm->first_tid[ts]; tid < tm->first_tid[ts + 1]; tid++)
    if (tm->tid_is_self_loop[tid]) return tid;
  return 0;
}

static int in_sorted(const int32_t *v, int32_t n, int32_t x) {
  int32_t lo = 0, hi = n - 1;
  while (lo <= hi) {
    int32_t m = lo + (hi - lo) / 2;
    if (v[m] == x) return 1;
    if (v[m] < x) lo = m + 1; else hi = m - 1;
  }
  return 0;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

int32_t kio_tmodel_pdfs_for_phones(const kio_tmodel *tm, const int32_t *phones,
                                   int32_t nphones, int32_t *pdfs, int *shared) {
  int32_t np = 0;
  for (int32_t ts = 1; ts <= tm->num_tuples; ts++)
    if (in_sorted(phones, nphones, tm->tuples[ts - 1].phone)) {
      pdfs[np++] = tm->tuples[ts - 1].forward_pdf;
      pdfs[np++] = tm->tuples[ts - 1].self_loop_pdf;
    }
  qsort(pdfs, (size_t)np, sizeof *pdfs, cmp_i32);
  int32_t k = 0;
  for (int32_t i = 0; i < np; i++)
    if (k == 0 || pdfs[k - 1] != pdfs[i]) pdfs[k++] = pdfs[i];
  *shared = 0;
  for (int32_t ts = 1; ts <= tm->num_tuples && !*shared; ts++) {
    const kio_tuple *t = &tm->tuples[ts - 1];
    if (!in_sorted(phones, nphones, t->phone) &&
        (in_sorted(pdfs, k, t->forward_pdf) || in_sorted(pdfs, k, t->self_loop_pdf)))
      *shared = 1;
  }
  return k;
}

int32_t kio_tid_to_phone(const kio_tmodel *tm, int32_t tid) {
  int32_t ts = tm->tid2ts[tid];
  return ts > 0 ? tm->tuples[ts - 1].phone : 0;
}

int kio_tid_is_final(const kio_tmodel *tm, int32_t tid) {
  int32_t ts = tm->tid2ts[tid];
  const kio_tuple *t = &tm->tuples[ts - 1];
  const kio_topo_entry *e = &tm->topo.entries[tm->topo.phone2idx[t->phone]];
  const kio_topo_state *s = &e->states[t->hmm_state];
  return s->trans[tid - tm->first_tid[ts]].dest + 1 == e->num_states;
}

int32_t kio_tid_to_pdf_class(const kio_tmodel *tm, int32_t tid) {
  const kio_tuple *t = &tm->tuples[tm->tid2ts[tid] - 1];
  const kio_topo_state *s =
      &tm->topo.entries[tm->topo.phone2idx[t->phone]].states[t->hmm_state];
  return tm->tid_is_self_loop[tid] ? s->self_loop_pdf_class : s->forward_pdf_class;
}

/* IsReordered: the self-loop after the forward transition. */
static int is_reordered(const kio_tmodel *tm, const int32_t *a, int32_t n) {
  for (int32_t i = 0; i + 1 < n; i++) {
    if (tm->tid2ts[a[i]] == tm->tid2ts[a[i + 1]]) continue;
    if (tm->tid_is_self_loop[a[i]]) return 1;
    if (tm->tid_is_self_loop[a[i + 1]]) return 0;
  }
  if (n == 0 || tm->tid_is_self_loop[a[0]]) return 0;
  return tm->tid_is_self_loop[a[n - 1]] != 0;
}

int32_t kio_split_to_phones(const kio_tmodel *tm, const int32_t *a, int32_t n, int32_t *ends,
                            int *ok) {
  int reordered = is_reordered(tm, a, n);
  int32_t m = 0;
  int good = 1;
  for (int32_t i = 0; i < n; i++) {
    if (kio_tid_is_final(tm, a[i])) {
      if (reordered)
        while (i + 1 < n && tm->tid_is_self_loop[a[i + 1]]) i++;
      ends[m++] = i + 1;
    } else if (i + 1 == n) {
      good = 0;
      ends[m++] = i + 1;
    } else {
      int32_t s0 = tm->tid2ts[a[i]], s1 = tm->tid2ts[a[i + 1]];
      if (s0 != s1 && tm->tuples[s0 - 1].phone != tm->tuples[s1 - 1].phone) {
        good = 0;
        ends[m++] = i + 1;
      }
    }
  }
  /* each phone starts in its topology's first state, where that one emits */
  for (int32_t k = 0; k < m; k++) {
    const kio_tuple *t = &tm->tuples[tm->tid2ts[a[k ? ends[k - 1] : 0]] - 1];
    const kio_topo_entry *e = &tm->topo.entries[tm->topo.phone2idx[t->phone]];
    if (e->states[0].forward_pdf_class != -1 && t->hmm_state != 0) good = 0;
  }
  if (ok) *ok = good;
  return m;
}

/* ComputeDerivedOfProbs(): BaseFloat p = Exp(logp); BaseFloat q = 1.0 - p
 * (evaluated in double, then narrowed); Log(q) in float. */
static int tm_compute_derived_of_probs(kio_tmodel *tm) {
  int32_t T = tm->num_tuples;
  free(tm->nonloop_log_prob);
  tm->nonloop_log_prob = calloc((size_t)T + 1, sizeof(float));
  if (!tm->nonloop_log_prob) { kio_set_error("out of memory"); return KIO_ERR; }
  for (int32_t ts = 1; ts <= T; ts++) {
    int32_t tid = kio_ts_self_loop(tm, ts);
    if (tid == 0) {
      tm->nonloop_log_prob[ts] = 0.0f;
    } else {
      float p = expf(tm->log_probs[tid]);
      float q = (float)(1.0 - (double)p);
      if (q <= 0.0f) {
        char buf[32];
        KIO_WARN("ComputeDerivedOfProbs(): non-self-loop prob is %s", kio_fmt_g(buf, q));
        q = 1.0e-10f;
      }
      tm->nonloop_log_prob[ts] = logf(q);
    }
  }
  return KIO_OK;
}

int kio_tmodel_update_derived(kio_tmodel *tm) {
  if (tm_compute_derived_of_probs(tm) != KIO_OK) {
    KIO_ERROR("%s", kio_last_error());
    return KIO_ERR;
  }
  return KIO_OK;
}

int kio_tmodel_read(FILE *f, int binary, kio_tmodel *tm) {
  char tok[64];
  int32_t T;
  kio_tmodel_free(tm);
  if (kio_expect_token(f, binary, "<TransitionModel>") != KIO_OK) goto fail;
  if (kio_topology_read(f, binary, &tm->topo) != KIO_OK) goto fail;
  if (kio_read_token(f, binary, tok, sizeof tok) != KIO_OK) goto fail;
  int tuples = !strcmp(tok, "<Tuples>");
  if (!tuples && strcmp(tok, "<Triples>") != 0) {
    kio_set_error("Expected token \"<Triples>\" or \"<Tuples>\", got instead \"%s\".", tok);
    goto fail;
  }
  tm->tuples_are_triples = !tuples;
  if (kio_read_int32(f, binary, &T) != KIO_OK) goto fail;
  if (T < 0 || T > TM_MAX_TUPLES) {
    kio_set_error("TransitionModel: bad number of tuples %d", (int)T);
    goto fail;
  }
  /* Grown while reading (fuzzing: a corrupt count must not allocate 1 GB
   * before the read fails). */
  int32_t tcap = T < 65536 ? (T ? T : 1) : 65536;
  tm->tuples = calloc((size_t)tcap, sizeof *tm->tuples);
  if (!tm->tuples) { kio_set_error("out of memory"); goto fail; }
  for (int32_t i = 0; i < T; i++) {
    if (i == tcap) {
      tcap = T - tcap < tcap ? T : 2 * tcap;
      kio_tuple *nt = realloc(tm->tuples, (size_t)tcap * sizeof *nt);
      if (!nt) { kio_set_error("out of memory"); goto fail; }
      tm->tuples = nt;
    }
    kio_tuple *t = &tm->tuples[i];
    if (kio_read_int32(f, binary, &t->phone) != KIO_OK ||
        kio_read_int32(f, binary, &t->hmm_state) != KIO_OK ||
        kio_read_int32(f, binary, &t->forward_pdf) != KIO_OK)
      goto fail;
    if (tuples) {
      if (kio_read_int32(f, binary, &t->self_loop_pdf) != KIO_OK) goto fail;
    } else {
      t->self_loop_pdf = t->forward_pdf;
    }
    tm->num_tuples = i + 1; /* only fully read tuples count */
  }
  if (kio_read_token(f, binary, tok, sizeof tok) != KIO_OK) goto fail;
  if (strcmp(tok, "</Triples>") != 0 && strcmp(tok, "</Tuples>") != 0) {
    kio_set_error("Expected token \"</Triples>\" or \"</Tuples>\", got instead \"%s\".", tok);
    goto fail;
  }
  if (tm_compute_derived(tm) != KIO_OK) goto fail;
  if (kio_expect_token(f, binary, "<LogProbs>") != KIO_OK) goto fail;
  kio_vector v = {0};
  if (kio_vector_read(f, binary, &v) != KIO_OK) { kio_vector_free(&v); goto fail; }
  if (v.dim != tm->num_tids + 1) {
    kio_set_error("TransitionModel: <LogProbs> has dimension %d, expected %d",
                  (int)v.dim, (int)tm->num_tids + 1);
    kio_vector_free(&v);
    goto fail;
  }
  tm->log_probs = v.data; /* take ownership */
  if (kio_expect_token(f, binary, "</LogProbs>") != KIO_OK) goto fail;
  if (kio_expect_token(f, binary, "</TransitionModel>") != KIO_OK) goto fail;
  for (int32_t tid = 1; tid <= tm->num_tids; tid++) {
    float lp = tm->log_probs[tid];
    if (!(lp <= 0.0f) || !isfinite(lp)) {
      kio_set_error("TransitionModel: log-prob of transition-id %d is %g "
                    "(must be finite and <= 0)", (int)tid, (double)lp);
      goto fail;
    }
  }
  if (tm_compute_derived_of_probs(tm) != KIO_OK) goto fail;
  return KIO_OK;
fail:
  kio_tmodel_free(tm);
  return KIO_ERR;
}

int kio_tmodel_write(FILE *f, int binary, const kio_tmodel *tm) {
  int is_hmm = 1;
  const kio_topology *tp = &tm->topo;
  for (int32_t i = 0; i < tp->num_entries && is_hmm; i++)
    for (int32_t j = 0; j < tp->entries[i].num_states; j++)
      if (tp->entries[i].states[j].forward_pdf_class !=
          tp->entries[i].states[j].self_loop_pdf_class) {
        is_hmm = 0;
        break;
      }
  kio_write_token(f, binary, "<TransitionModel>");
  if (!binary) fputc('\n', f);
  if (kio_topology_write(f, binary, tp) != KIO_OK) return KIO_ERR;
  kio_write_token(f, binary, is_hmm ? "<Triples>" : "<Tuples>");
  kio_write_int32(f, binary, tm->num_tuples);
  if (!binary) fputc('\n', f);
  for (int32_t i = 0; i < tm->num_tuples; i++) {
    const kio_tuple *t = &tm->tuples[i];
    kio_write_int32(f, binary, t->phone);
    kio_write_int32(f, binary, t->hmm_state);
    kio_write_int32(f, binary, t->forward_pdf);
    if (!is_hmm) kio_write_int32(f, binary, t->self_loop_pdf);
    if (!binary) fputc('\n', f);
  }
  kio_write_token(f, binary, is_hmm ? "</Triples>" : "</Tuples>");
  if (!binary) fputc('\n', f);
  kio_write_token(f, binary, "<LogProbs>");
  if (!binary) fputc('\n', f);
  kio_vector v = {tm->num_tids + 1, tm->log_probs, 0};
  if (kio_vector_write(f, binary, &v) != KIO_OK) return KIO_ERR;
  kio_write_token(f, binary, "</LogProbs>");
  if (!binary) fputc('\n', f);
  kio_write_token(f, binary, "</TransitionModel>");
  if (!binary) fputc('\n', f);
  return ferror(f) ? KIO_ERR : KIO_OK;
}
