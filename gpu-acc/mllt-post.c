/* The table holder of Kaldi's Posterior (hmm/posterior.cc: ReadPosterior,
 * WritePosterior): binary, per frame a size then (int32, float) pairs;
 * text, one line of "[ tid weight ... ]" groups. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "gpu-acc/mllt.h"

int gacc_post_reserve(gacc_post *p, size_t frames, size_t pairs) {
  if (frames + 1 > p->cap_off) {
    size_t c = p->cap_off ? p->cap_off : 256;
    while (c < frames + 1) c *= 2;
    int32_t *o = realloc(p->off, c * sizeof(int32_t));
    if (!o) goto oom;
    p->off = o;
    p->cap_off = c;
  }
  if (pairs > p->cap_pairs) {
    size_t c = p->cap_pairs ? p->cap_pairs : 256;
    while (c < pairs) c *= 2;
    int32_t *t = realloc(p->tid, c * sizeof(int32_t));
    if (!t) goto oom;
    p->tid = t;
    float *w = realloc(p->w, c * sizeof(float));
    if (!w) goto oom;
    p->w = w;
    p->cap_pairs = c;
  }
  return KIO_OK;
oom:
  kio_set_error("out of memory reading a Posterior");
  return KIO_ERR;
}

static int read_binary(FILE *f, gacc_post *p) {
  int32_t sz;
  if (kio_read_int32(f, 1, &sz) != KIO_OK) return KIO_ERR;
  if (sz < 0 || sz > 10000000) {
    kio_set_error("Reading posterior: got negative or improbably large size%d", (int)sz);
    return KIO_ERR;
  }
  /* grown as pairs arrive: a corrupt size cannot allocate much */
  if (gacc_post_reserve(p, (size_t)(sz < 65536 ? sz : 65536), 0) != KIO_OK) return KIO_ERR;
  size_t n = 0;
  p->off[0] = 0;
  for (int32_t t = 0; t < sz; t++) {
    int32_t sz2;
    if (kio_read_int32(f, 1, &sz2) != KIO_OK) return KIO_ERR;
    if (sz2 < 0) {
      kio_set_error("Reading posteriors: got negative size");
      return KIO_ERR;
    }
    if (gacc_post_reserve(p, (size_t)t + 1, n + (size_t)sz2 < n + 4096 ? n + (size_t)sz2 : n + 4096) !=
        KIO_OK)
      return KIO_ERR;
    for (int32_t j = 0; j < sz2; j++, n++) {
      if (n == p->cap_pairs && gacc_post_reserve(p, (size_t)t + 1, n + 1) != KIO_OK) return KIO_ERR;
      if (kio_read_int32(f, 1, &p->tid[n]) != KIO_OK || kio_read_float(f, 1, &p->w[n]) != KIO_OK)
        return KIO_ERR;
    }
    if (n > INT32_MAX) {
      kio_set_error("Posterior too large");
      return KIO_ERR;
    }
    p->off[t + 1] = (int32_t)n;
  }
  p->frames = sz;
  return KIO_OK;
}

/* One line; "[", then (int, float) pairs while they parse, then "]". */
static int read_text(FILE *f, gacc_post *p) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t len = getline(&line, &cap, f);
  if (len < 0) {
    free(line);
    kio_set_error("holder of Posterior: error reading line [eof]");
    return KIO_ERR;
  }
  size_t n = 0;
  int32_t t = 0;
  int rc = KIO_ERR;
  char *s = line;
  if (gacc_post_reserve(p, 1, 0) != KIO_OK) goto out;
  p->off[0] = 0;
  for (;;) {
    while (isspace((unsigned char)*s)) s++;
    if (!*s) break;
    char *e = s;
    while (*e && !isspace((unsigned char)*e)) e++;
    if (e - s != 1 || *s != '[') {
      kio_set_error("Reading Posterior object: expecting [, got %.*s", (int)(e - s), s);
      goto out;
    }
    s = e;
    for (;;) {
      char *e1, *e2;
      long id = strtol(s, &e1, 10);
      if (e1 == s || id < INT32_MIN || id > INT32_MAX) break;
      float w = strtof(e1, &e2);
      if (e2 == e1) break;
      if (gacc_post_reserve(p, (size_t)t + 2, n + 1) != KIO_OK) goto out;
      p->tid[n] = (int32_t)id;
      p->w[n++] = w;
      s = e2;
    }
    while (isspace((unsigned char)*s)) s++;
    e = s;
    while (*e && !isspace((unsigned char)*e)) e++;
    if (e - s != 1 || *s != ']') {
      kio_set_error("Reading Posterior object: expecting ], got %.*s", (int)(e - s), s);
      goto out;
    }
    s = e;
    if (gacc_post_reserve(p, (size_t)t + 2, 0) != KIO_OK) goto out;
    p->off[++t] = (int32_t)n;
  }
  p->frames = t;
  rc = KIO_OK;
out:
  free(line);
  return rc;
}

static int post_read(FILE *f, int binary, void *obj) {
  gacc_post *p = obj;
  p->frames = 0;
  int rc = binary ? read_binary(f, p) : read_text(f, p);
  if (rc != KIO_OK) p->frames = 0;
  return rc;
}

static int post_write(FILE *f, int binary, const void *obj) {
  const gacc_post *p = obj;
  if (binary) {
    kio_write_int32(f, 1, p->frames);
    for (int32_t t = 0; t < p->frames; t++) {
      kio_write_int32(f, 1, p->off[t + 1] - p->off[t]);
      for (int32_t j = p->off[t]; j < p->off[t + 1]; j++) {
        kio_write_int32(f, 1, p->tid[j]);
        kio_write_float(f, 1, p->w[j]);
      }
    }
  } else {
    for (int32_t t = 0; t < p->frames; t++) {
      fputs("[ ", f);
      for (int32_t j = p->off[t]; j < p->off[t + 1]; j++) {
        fprintf(f, "%d ", (int)p->tid[j]);
        kio_write_float(f, 0, p->w[j]);
      }
      fputs("] ", f);
    }
    putc('\n', f);
  }
  return ferror(f) ? KIO_ERR : KIO_OK;
}

static void post_free(void *obj) {
  gacc_post *p = obj;
  free(p->off);
  free(p->tid);
  free(p->w);
  memset(p, 0, sizeof *p);
}

const kio_holder gacc_post_holder = {
  "Posterior", sizeof(gacc_post), 1, post_read, post_write, post_free, NULL
};

/* ---- ali-to-post and weight-silence-post (hmm/posterior.cc) ---- */

int gacc_sil_set_load(gacc_sil_set *s, const char *model_rx, const int32_t *phones, int n) {
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  memset(s, 0, sizeof *s);
  if (kio_model_read(model_rx, &tm, &am) != KIO_OK) return KIO_ERR;
  kio_am_gmm_free(&am);
  s->num_tids = tm.num_tids;
  s->is_sil = calloc((size_t)tm.num_tids + 1, 1);
  if (!s->is_sil) {
    kio_tmodel_free(&tm);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  for (int32_t t = 1; t <= tm.num_tids; t++) {
    int32_t ph = kio_tid_to_phone(&tm, t);
    for (int i = 0; i < n; i++)
      if (phones[i] == ph) s->is_sil[t] = 1;
  }
  kio_tmodel_free(&tm);
  return KIO_OK;
}

void gacc_sil_set_free(gacc_sil_set *s) {
  free(s->is_sil);
  memset(s, 0, sizeof *s);
}

int gacc_parse_phones(const char *str, int32_t **phones, int *n) {
  *phones = NULL;
  *n = 0;
  if (!*str) return KIO_OK;
  int cap = 1;
  for (const char *p = str; *p; p++) cap += *p == ':';
  int32_t *v = malloc(sizeof(int32_t) * (size_t)cap);
  if (!v) return KIO_ERR;
  const char *p = str;
  for (int i = 0; i < cap; i++) {
    char *e;
    long x = strtol(p, &e, 10);
    if (e == p || (*e != ':' && *e != '\0') || x < INT32_MIN || x > INT32_MAX ||
        isspace((unsigned char)*p)) {
      free(v);
      return KIO_ERR;
    }
    v[i] = (int32_t)x;
    p = e + (*e == ':');
  }
  *phones = v;
  *n = cap;
  return KIO_OK;
}

int gacc_post_from_ali(gacc_post *p, const int32_t *ali, int32_t n) {
  if (gacc_post_reserve(p, (size_t)n, (size_t)n) != KIO_OK) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  p->off[0] = 0;
  for (int32_t t = 0; t < n; t++) {
    p->tid[t] = ali[t];
    p->w[t] = 1.0f;
    p->off[t + 1] = t + 1;
  }
  p->frames = n;
  return KIO_OK;
}

int gacc_post_weight_silence(gacc_post *p, const gacc_sil_set *s, float scale, int distribute,
                             const char *key) {
  int32_t n = 0;
  for (int32_t t = 0; t < p->frames; t++) {
    int32_t b = p->off[t], e = p->off[t + 1];
    for (int32_t j = b; j < e; j++)
      if (p->tid[j] < 1 || p->tid[j] > s->num_tids) {
        KIO_ERROR("Transition-id %d out of range [1, %d] at frame %d of the posteriors for "
                  "utterance %s", (int)p->tid[j], (int)s->num_tids, (int)t, key);
        return KIO_ERR;
      }
    p->off[t] = n;
    if (!distribute) {
      for (int32_t j = b; j < e; j++) {
        int32_t tid = p->tid[j];
        float w = p->w[j];
        if (s->is_sil[tid]) {
          if (scale == 0.0f) continue;
          w = w * scale;
        }
        p->tid[n] = tid;
        p->w[n++] = w;
      }
      continue;
    }
    float sil = 0.0f, nonsil = 0.0f;
    for (int32_t j = b; j < e; j++) {
      if (s->is_sil[p->tid[j]]) sil += p->w[j];
      else nonsil += p->w[j];
    }
    if (!(sil >= 0.0f && nonsil >= 0.0f)) {
      KIO_ERROR("Negative posteriors at frame %d of utterance %s: --distribute needs "
                "non-negative ones", (int)t, key);
      return KIO_ERR;
    }
    float fs = 1.0f;
    int keep = 1;
    if (sil + nonsil != 0.0f) {
      fs = (sil * scale + nonsil) / (sil + nonsil);
      keep = fs != 0.0f;
    }
    for (int32_t j = b; keep && j < e; j++) {
      p->tid[n] = p->tid[j];
      p->w[n++] = sil + nonsil != 0.0f ? p->w[j] * fs : p->w[j];
    }
  }
  p->off[p->frames] = n;
  return KIO_OK;
}
