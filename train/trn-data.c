/* The trainer's resident data: every job's features (through the features
 * rspecifier, the recipe's pipeline computed in process), training graphs
 * (trn-graphs.c), speakers and the current alignments. */
#include "train/trainer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/io/table.h"
#include "base/sys/cpu-share.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "train/trn-log.h"

char *trn_subst(const char *tmpl, int job, int iter) {
  size_t cap = strlen(tmpl) * 2 + 64, n = 0;
  char *out = malloc(cap);
  if (!out) return NULL;
  for (const char *p = tmpl; *p;) {
    char num[24];
    const char *rep = NULL;
    size_t skip = 0;
    if (!strncmp(p, "JOB", 3)) { snprintf(num, sizeof num, "%d", job); rep = num; skip = 3; }
    else if (!strncmp(p, "ITER", 4) && iter >= 0) {
      snprintf(num, sizeof num, "%d", iter);
      rep = num;
      skip = 4;
    }
    size_t add = rep ? strlen(rep) : 1;
    if (n + add + 1 > cap) {
      cap = 2 * (n + add + 1);
      char *o = realloc(out, cap);
      if (!o) { free(out); return NULL; }
      out = o;
    }
    if (rep) { memcpy(out + n, rep, add); n += add; p += skip; }
    else out[n++] = *p++;
  }
  out[n] = 0;
  return out;
}

static char *path2(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", a, b);
  return s;
}

/* Keys sorted for lookups (index into d->u). */
static const trn_data *g_sort_d;
static int key_cmp(const void *a, const void *b) {
  return strcmp(g_sort_d->u[*(const int32_t *)a].key, g_sort_d->u[*(const int32_t *)b].key);
}
int32_t trn_key_find(const trn_key_index *ki, const char *key) {
  int32_t lo = 0, hi = ki->d->n - 1;
  while (lo <= hi) {
    int32_t mid = (lo + hi) / 2;
    int c = strcmp(ki->d->u[ki->idx[mid]].key, key);
    if (c == 0) return ki->idx[mid];
    if (c < 0) lo = mid + 1; else hi = mid - 1;
  }
  return -1;
}

/* Features of one job, appended to d (grown as needed). */
static int load_feats(trn_data *d, int job, const char *rspec, int32_t *cap) {
  kio_seq_reader *r = NULL;
  if (kio_seq_open(&r, rspec, &kio_matrix_holder) != KIO_OK) return KIO_ERR;
  int rc = KIO_OK;
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    if (d->n == *cap) {
      int32_t nc = *cap ? 2 * *cap : 1024;
      trn_utt *u = realloc(d->u, sizeof *u * (size_t)nc);
      kio_matrix *fs = realloc(d->feat_store, sizeof *fs * (size_t)nc);
      if (u) d->u = u;
      if (fs) d->feat_store = fs;
      if (!u || !fs) { KIO_ERROR("out of memory"); rc = KIO_ERR; break; }
      *cap = nc;
    }
    trn_utt *u = &d->u[d->n];
    memset(u, 0, sizeof *u);
    kio_matrix *m = &d->feat_store[d->n];
    memset(m, 0, sizeof *m);
    u->key = strdup(kio_seq_key(r));
    u->job = job;
    u->spk = -1;
    if (!u->key || kio_seq_take(r, m) != KIO_OK) { rc = KIO_ERR; break; }
    d->frames += m->rows;
    d->n++;
  }
  if (kio_seq_close(r) != KIO_OK) rc = KIO_ERR;
  return rc;
}

/* Every job's features, the jobs read side by side (each job's pipe, e.g.
 * apply-cmvn | add-deltas, runs beside the others': 16 jobs one after the
 * other took 1.2 s for data/train_x4 on the H200) into arrays of their own,
 * then appended to d in job order. Each job's log lines are deferred and
 * logged in job order up to the first job that failed, as the jobs one after
 * the other would have; a job after a failed one is not started. */
typedef struct {
  const trn_cfg *c;
  trn_data *jd;           /* per job: its utterances and features */
  int *rc;
  kio_log_deferred **lines;
  int next, failed;       /* failed: the first job that failed (nj: none) */
  pthread_mutex_t mu;
} feat_in;

static void *feat_worker(void *arg) {
  feat_in *f = arg;
  for (;;) {
    pthread_mutex_lock(&f->mu);
    int j = f->next++, stop = j > f->failed;
    pthread_mutex_unlock(&f->mu);
    if (j >= f->c->nj || stop) break;
    kio_log_defer(&f->lines[j]);
    char *rs = trn_subst(f->c->feats, j + 1, -1);
    int32_t cap = 0;
    if (!rs) KIO_ERROR("out of memory");
    f->rc[j] = rs ? load_feats(&f->jd[j], j, rs, &cap) : KIO_ERR;
    free(rs);
    kio_log_defer(NULL);
    if (f->rc[j] != KIO_OK) {
      pthread_mutex_lock(&f->mu);
      if (j < f->failed) f->failed = j;
      pthread_mutex_unlock(&f->mu);
    }
  }
  return NULL;
}

static void free_job_feats(trn_data *jd) {
  for (int32_t i = 0; i < jd->n; i++) {
    free(jd->u[i].key);
    kio_matrix_free(&jd->feat_store[i]);
  }
  free(jd->u);
  free(jd->feat_store);
}

static int load_all_feats(trn_data *d, const trn_cfg *c) {
  int nj = c->nj, nth = kio_cpu_share(0);
  if (nth > nj) nth = nj;
  if (nth < 1) nth = 1;
  feat_in f = { c, calloc((size_t)nj, sizeof(trn_data)), calloc((size_t)nj, sizeof(int)),
                calloc((size_t)nj, sizeof(kio_log_deferred *)), 0, nj, PTHREAD_MUTEX_INITIALIZER };
  pthread_t *th = calloc((size_t)nth, sizeof *th);
  if (!f.jd || !f.rc || !f.lines || !th) {
    free(f.jd); free(f.rc); free(f.lines); free(th);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  for (int j = 0; j < nj; j++) f.rc[j] = KIO_ERR;
  int started = 0;
  while (started < nth - 1 && pthread_create(&th[started], NULL, feat_worker, &f) == 0) started++;
  feat_worker(&f);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  int rc = KIO_OK;
  int32_t total = 0;
  for (int j = 0; j < nj; j++) {
    if (rc == KIO_OK) kio_log_replay(&f.lines[j]);
    else kio_log_discard(&f.lines[j]);
    if (f.rc[j] != KIO_OK) rc = KIO_ERR;
    total += f.jd[j].n;
  }
  if (rc == KIO_OK) {
    d->u = malloc(sizeof *d->u * (size_t)(total ? total : 1));
    d->feat_store = malloc(sizeof *d->feat_store * (size_t)(total ? total : 1));
    if (!d->u || !d->feat_store) { KIO_ERROR("out of memory"); rc = KIO_ERR; }
  }
  for (int j = 0; j < nj; j++) {
    trn_data *jd = &f.jd[j];
    if (rc == KIO_OK) {
      d->job_start[j] = d->n;
      if (jd->n) {
        memcpy(d->u + d->n, jd->u, sizeof *jd->u * (size_t)jd->n);
        memcpy(d->feat_store + d->n, jd->feat_store, sizeof *jd->feat_store * (size_t)jd->n);
      }
      d->n += jd->n;
      d->frames += jd->frames;
      free(jd->u);
      free(jd->feat_store);
    } else {
      free_job_feats(jd);
    }
  }
  free(f.jd); free(f.rc); free(f.lines); free(th);
  return rc;
}

int trn_data_reload_feats(trn_data *d, const char *rspec_tmpl, int iter) {
  int32_t i = 0;
  for (int j = 0; j < d->nj; j++) {
    char *rs = trn_subst(rspec_tmpl, j + 1, iter);
    kio_seq_reader *r = NULL;
    if (!rs || kio_seq_open(&r, rs, &kio_matrix_holder) != KIO_OK) { free(rs); return KIO_ERR; }
    int rc = KIO_OK;
    for (; !kio_seq_done(r) && rc == KIO_OK; kio_seq_next(r), i++) {
      if (i >= d->n_store || d->store_job[i] != j || strcmp(d->store_key[i], kio_seq_key(r))) {
        KIO_ERROR("Features of %s: utterance %s is not the one read before", rs,
                  kio_seq_key(r));
        rc = KIO_ERR;
        break;
      }
      int32_t rows = d->feat_store[i].rows;
      if (kio_seq_take(r, &d->feat_store[i]) != KIO_OK) rc = KIO_ERR;
      else if (d->feat_store[i].rows != rows) {
        KIO_ERROR("Features of %s changed length in %s", kio_seq_key(r), rs);
        rc = KIO_ERR;
      }
    }
    if (kio_seq_close(r) != KIO_OK) rc = KIO_ERR;
    free(rs);
    if (rc != KIO_OK) return KIO_ERR;
  }
  return KIO_OK;
}

static int load_speakers(trn_data *d, const trn_cfg *c, const trn_key_index *ki) {
  char **names = NULL;
  int32_t nn = 0, cap = 0;
  int rc = KIO_OK;
  for (int j = 0; j < d->nj && rc == KIO_OK; j++) {
    char rel[64];
    snprintf(rel, sizeof rel, "%d/utt2spk", j + 1);
    char *p = path2(c->sdata, rel);
    FILE *f = p ? fopen(p, "r") : NULL;
    if (!f) {
      KIO_ERROR("Could not open %s", p ? p : rel);
      free(p);
      rc = KIO_ERR;
      break;
    }
    char line[4096], utt[2048], spk[2048];
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "%2047s %2047s", utt, spk) != 2) continue;
      int32_t ui = trn_key_find(ki, utt);
      if (ui < 0) continue;
      /* utt2spk is sorted, so a speaker's lines are together (mostly); a
       * short linear look-back keeps it simple. */
      int32_t s = -1;
      for (int32_t k = nn - 1; k >= 0 && k >= nn - 8; k--)
        if (!strcmp(names[k], spk)) { s = k; break; }
      if (s < 0) {
        for (int32_t k = 0; k < nn - 8; k++)
          if (!strcmp(names[k], spk)) { s = k; break; }
      }
      if (s < 0) {
        if (nn == cap) {
          cap = cap ? 2 * cap : 256;
          char **nw = realloc(names, sizeof *nw * (size_t)cap);
          if (!nw) { rc = KIO_ERR; break; }
          names = nw;
        }
        names[nn] = strdup(spk);
        s = nn++;
      }
      d->u[ui].spk = s;
    }
    fclose(f);
    free(p);
  }
  for (int32_t k = 0; k < nn; k++) free(names[k]);
  free(names);
  /* utterances without a speaker line: a speaker each */
  for (int32_t i = 0; i < d->n; i++)
    if (d->u[i].spk < 0) d->u[i].spk = nn++;
  d->num_spk = nn;
  return rc;
}

static int load_ali(trn_data *d, const char *tmpl, const trn_key_index *ki) {
  for (int j = 0; j < d->nj; j++) {
    char *rs = trn_subst(tmpl, j + 1, -1);
    kio_seq_reader *r = NULL;
    if (!rs || kio_seq_open(&r, rs, &kio_int_vec_holder) != KIO_OK) { free(rs); return KIO_ERR; }
    int rc = KIO_OK;
    for (; !kio_seq_done(r); kio_seq_next(r)) {
      /* job j's alignments serve job j's utterances only, as each job of
       * the scripts reads its own ali.JOB.gz (alignments made on another
       * split of the data leave the others without one) */
      int32_t ui = trn_key_find(ki, kio_seq_key(r));
      if (ui < 0 || d->u[ui].job != j) continue;
      kio_int_vec v = {0, NULL};
      if (kio_seq_take(r, &v) != KIO_OK) { rc = KIO_ERR; break; }
      free(d->u[ui].ali);
      d->u[ui].ali = v.v;
      d->u[ui].ali_len = v.n;
    }
    if (kio_seq_close(r) != KIO_OK) rc = KIO_ERR;
    free(rs);
    if (rc != KIO_OK) return KIO_ERR;
  }
  return KIO_OK;
}

static int replicate(trn_data *d, int times) {
  if (times <= 1) return KIO_OK;
  int32_t n0 = d->n;
  trn_utt *u = malloc(sizeof *u * (size_t)n0 * (size_t)times);
  int32_t *js = malloc(sizeof(int32_t) * (size_t)(d->nj + 1));
  if (!u || !js) { free(u); free(js); KIO_ERROR("out of memory"); return KIO_ERR; }
  int32_t k = 0;
  for (int j = 0; j < d->nj; j++) {
    js[j] = k;
    for (int t = 0; t < times; t++)
      for (int32_t i = d->job_start[j]; i < d->job_start[j + 1]; i++) {
        u[k] = d->u[i];
        u[k].replica = t;
        if (t > 0) {
          size_t n = strlen(d->u[i].key) + 16;
          u[k].key = malloc(n);
          if (u[k].key) snprintf(u[k].key, n, "r%d-%s", t, d->u[i].key);
          u[k].spk = d->u[i].spk + t * d->num_spk;
          if (d->u[i].ali) {
            u[k].ali = malloc(sizeof(int32_t) * (size_t)d->u[i].ali_len);
            if (u[k].ali) memcpy(u[k].ali, d->u[i].ali, sizeof(int32_t) * (size_t)d->u[i].ali_len);
          }
          d->frames += d->u[i].feats->rows;
        }
        k++;
      }
  }
  js[d->nj] = k;
  free(d->u);
  free(d->job_start);
  d->u = u;
  d->job_start = js;
  d->n = k;
  d->num_spk *= times;
  return KIO_OK;
}

int trn_data_load_feats(trn_data *d, const trn_cfg *c) {
  memset(d, 0, sizeof *d);
  d->nj = c->nj;
  d->job_start = calloc((size_t)c->nj + 1, sizeof(int32_t));
  if (!d->job_start) { KIO_ERROR("out of memory"); return KIO_ERR; }
  double t0 = kio_now_s();
  if (load_all_feats(d, c) != KIO_OK) return KIO_ERR;
  d->job_start[c->nj] = d->n;
  d->n_store = d->n;
  d->store_key = malloc(sizeof(char *) * (size_t)(d->n ? d->n : 1));
  d->store_job = malloc(sizeof(int32_t) * (size_t)(d->n ? d->n : 1));
  if (!d->store_key || !d->store_job) { KIO_ERROR("out of memory"); return KIO_ERR; }
  for (int32_t i = 0; i < d->n; i++) {
    d->u[i].feats = &d->feat_store[i];
    d->store_key[i] = d->u[i].key;
    d->store_job[i] = d->u[i].job;
  }
  d->t_feats = kio_now_s() - t0;
  return KIO_OK;
}

int trn_data_load_graphs(trn_data *d, const trn_cfg *c, const kio_tmodel *tm, int graphs_background,
                         int gated) {
  double t1 = kio_now_s();
  trn_key_index ki = { d, malloc(sizeof(int32_t) * (size_t)(d->n ? d->n : 1)) };
  if (!ki.idx) { KIO_ERROR("out of memory"); return KIO_ERR; }
  d->key_idx = ki.idx;
  for (int32_t i = 0; i < d->n; i++) ki.idx[i] = i;
  g_sort_d = d;
  qsort(ki.idx, (size_t)d->n, sizeof(int32_t), key_cmp);
  int rc = load_speakers(d, c, &ki);
  /* copies share their originals' graphs: those are needed first */
  if (c->replicate > 1) graphs_background = 0;
  if (rc == KIO_OK) rc = trn_graphs_start(d, c, tm, &ki, graphs_background, gated);
  if (rc == KIO_OK && !graphs_background) rc = trn_graphs_ready(d);
  d->t_graphs = kio_now_s() - t1;
  return rc;
}

int trn_data_load_ali(trn_data *d, const trn_cfg *c) {
  trn_key_index ki = { d, d->key_idx };
  int rc = KIO_OK;
  if (c->ali_in && *c->ali_in) rc = load_ali(d, c->ali_in, &ki);
  free(d->key_idx);
  d->key_idx = NULL;
  if (rc == KIO_OK) rc = replicate(d, c->replicate);
  int early = trn_graphs_at_gate(d);
  char at_model[96] = "";
  if (early >= 0)
    snprintf(at_model, sizeof at_model,
             ", started at the first model: %d of %d jobs compiled when the script said go",
             early, d->nj);
  if (rc == KIO_OK)
    KIO_LOG("Resident: %d utterances, %lld frames of dimension %d in %d jobs (features %.1f s, "
            "graphs %.1f s%s)", (int)d->n, (long long)d->frames,
            d->n_store ? (int)d->feat_store[0].cols : 0, d->nj, d->t_feats, d->t_graphs, at_model);
  return rc;
}

int trn_data_load_rest(trn_data *d, const trn_cfg *c, const kio_tmodel *tm, int graphs_background) {
  if (trn_data_load_graphs(d, c, tm, graphs_background, 0) != KIO_OK) return KIO_ERR;
  return trn_data_load_ali(d, c);
}

static int write_ali_job(const trn_data *d, const char *dir, int text, int j) {
  char wx[4200];
  snprintf(wx, sizeof wx, "ark%s:|gzip -c >%s/ali.%d.gz", text ? ",t" : "", dir, j + 1);
  kio_writer *w = NULL;
  if (kio_writer_open(&w, wx, &kio_int_vec_holder) != KIO_OK) return KIO_ERR;
  int rc = KIO_OK;
  for (int32_t i = d->job_start[j]; i < d->job_start[j + 1] && rc == KIO_OK; i++) {
    const trn_utt *u = &d->u[i];
    if (!u->ali || u->replica) continue;
    kio_int_vec v = { u->ali_len, u->ali };
    rc = kio_writer_write(w, u->key, &v);
  }
  if (rc != KIO_OK) { kio_writer_discard(w); return KIO_ERR; }
  return kio_writer_close(w);
}

/* The jobs' ali.JOB.gz written side by side (each waits for its gzip),
 * every job's log lines deferred and logged in job order afterwards, up to
 * the first that failed, as the jobs one after the other would have; a
 * job's phone statistics right after its alignments (their own log). */
typedef struct {
  const trn_data *d;
  const char *dir;
  int text, next;
  const kio_tmodel *phones;
  pthread_mutex_t mu;
  int *rc;
  kio_log_deferred **lines;
} ali_out;

static int ali_and_phones(ali_out *a, int j) {
  int rc = write_ali_job(a->d, a->dir, a->text, j);
  kio_log_defer(NULL);
  if (rc == KIO_OK && a->phones) rc = trn_phone_stats_job(a->d, a->phones, a->dir, j);
  return rc;
}

static void *ali_worker(void *arg) {
  ali_out *a = arg;
  for (;;) {
    pthread_mutex_lock(&a->mu);
    int j = a->next++;
    pthread_mutex_unlock(&a->mu);
    if (j >= a->d->nj) break;
    kio_log_defer(&a->lines[j]);
    a->rc[j] = ali_and_phones(a, j);
  }
  return NULL;
}

static int write_ali_jobs(const trn_data *d, const char *dir, int text, const kio_tmodel *phones) {
  int nj = d->nj, nth = kio_cpu_share(0);
  if (nth > nj) nth = nj;
  ali_out a = { d, dir, text, 0, phones, PTHREAD_MUTEX_INITIALIZER, calloc((size_t)nj, sizeof(int)),
                calloc((size_t)nj, sizeof(kio_log_deferred *)) };
  pthread_t *th = calloc((size_t)(nth > 1 ? nth : 1), sizeof *th);
  if (nth <= 1 || !a.rc || !a.lines || !th) {
    free(a.rc);
    free(a.lines);
    free(th);
    for (int j = 0; j < nj; j++)
      if (ali_and_phones(&a, j) != KIO_OK) return KIO_ERR;
    return KIO_OK;
  }
  int started = 0;
  while (started < nth - 1 && pthread_create(&th[started], NULL, ali_worker, &a) == 0) started++;
  ali_worker(&a);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  int rc = KIO_OK;
  for (int j = 0; j < nj; j++) {
    if (rc == KIO_OK) kio_log_replay(&a.lines[j]);
    else kio_log_discard(&a.lines[j]);
    if (a.rc[j] != KIO_OK) rc = KIO_ERR;
  }
  free(a.rc);
  free(a.lines);
  free(th);
  return rc;
}

int trn_data_write_ali(const trn_data *d, const char *dir, int text, const kio_tmodel *phones) {
  double t0 = kio_now_s();
  int rc = write_ali_jobs(d, dir, text, phones);
  if (rc == KIO_OK)
    KIO_VLOG(1, "Alignments: ali.JOB.gz%s of %d jobs written in %.2f s",
             phones ? " and phone_stats.JOB.gz" : "", d->nj, kio_now_s() - t0);
  return rc;
}

void trn_data_free(trn_data *d) {
  trn_graphs_abandon(d);
  for (int32_t i = 0; i < d->n; i++) {
    free(d->u[i].key);
    free(d->u[i].ali);
  }
  for (int32_t i = 0; i < d->n_store; i++) {
    kio_matrix_free(&d->feat_store[i]);
    if (d->graph_store) kio_fst_free(&d->graph_store[i]);
  }
  free(d->u);
  free(d->feat_store);
  free(d->graph_store);
  free(d->store_key);
  free(d->store_job);
  free(d->job_start);
  free(d->key_idx);
  memset(d, 0, sizeof *d);
}
