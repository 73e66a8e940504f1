/* train_lda_mllt.sh's posteriors pipe in-process:
 *   ark:gunzip -c ALI| ali-to-post ark:- ark:- [| weight-silence-post SCALE SIL MDL ark:- ark:-] |
 * The alignments are read as a table (the gunzip in-process, base/io);
 * each becomes ali-to-post's posterior (one pair per frame, weight 1) and
 * weight-silence-post's (pairs of silence phones scaled, dropped at scale
 * 0). Lookups by key follow Kaldi's random-access reader of an unsorted
 * archive: read on until the key, the entries passed kept. The programs'
 * command lines are printed at the start and their final LOG lines (counts
 * of the whole archive, read to its end as the programs do) at the end.
 * Anything else (options, quoting, another program) is not recognised: the
 * real pipe runs. */
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "base/sys/settings.h"
#include "gpu-acc/mllt-postpipe.h"

typedef struct {
  char *key;
  gacc_post p;
} entry;

struct gacc_post_src {
  kio_seq_reader *ali;
  int wsp;              /* weight-silence-post stage present */
  float scale;
  gacc_sil_set sil;     /* wsp only */
  char *argv[2][8];     /* the two programs' arguments, for their command lines */
  int argc[2];
  entry *tab;           /* open addressing, cap a power of 2 */
  size_t cap, n;
  long count;           /* alignments read */
  kio_int_vec buf;
};

static size_t hash(const char *s) {
  size_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static entry *find(gacc_post_src *s, const char *key) {
  if (!s->cap) return NULL;
  for (size_t i = hash(key) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (!s->tab[i].key) return NULL;
    if (!strcmp(s->tab[i].key, key)) return &s->tab[i];
  }
}

static entry *insert(gacc_post_src *s, const char *key) {
  if (2 * (s->n + 1) > s->cap) {
    size_t nc = s->cap ? 2 * s->cap : 1024;
    entry *nt = calloc(nc, sizeof(entry));
    if (!nt) return NULL;
    for (size_t i = 0; i < s->cap; i++) {
      if (!s->tab[i].key) continue;
      size_t j = hash(s->tab[i].key) & (nc - 1);
      while (nt[j].key) j = (j + 1) & (nc - 1);
      nt[j] = s->tab[i];
    }
    free(s->tab);
    s->tab = nt;
    s->cap = nc;
  }
  size_t i = hash(key) & (s->cap - 1);
  while (s->tab[i].key) i = (i + 1) & (s->cap - 1);
  if (!(s->tab[i].key = strdup(key))) return NULL;
  s->n++;
  return &s->tab[i];
}

/* Whitespace-separated words of [b, e) into w (at most max); -1 if more or
 * if a quote or escape shows (left to the shell). */
static int words(const char *b, const char *e, char **w, int max) {
  int n = 0;
  for (const char *p = b; p < e;) {
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    if (p == e) break;
    const char *q = p;
    while (q < e && *q != ' ' && *q != '\t') {
      if (*q == '\'' || *q == '"' || *q == '\\' || *q == '$' || *q == '`') return -1;
      q++;
    }
    if (n == max || !(w[n] = strndup(p, (size_t)(q - p)))) return -1;
    n++;
    p = q;
  }
  return n;
}

void gacc_post_src_free(gacc_post_src *s) {
  if (!s) return;
  for (size_t i = 0; i < s->cap; i++)
    if (s->tab[i].key) {
      free(s->tab[i].key);
      gacc_post_holder.free(&s->tab[i].p);
    }
  free(s->tab);
  gacc_sil_set_free(&s->sil);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < s->argc[k]; i++) free(s->argv[k][i]);
  kio_int_vec_holder.free(&s->buf);
  free(s);
}

/* The stages after the gunzip: "ali-to-post ark:- ark:-" and optionally
 * "weight-silence-post SCALE SIL MDL ark:- ark:-"; 1 if they are that. */
static int parse_stages(gacc_post_src *s, const char *p, const char **mdl, const char **sil) {
  const char *bar = strchr(p, '|');
  if (!bar) return 0;
  s->argc[0] = words(p, bar, s->argv[0], 8);
  if (s->argc[0] != 3 || strcmp(s->argv[0][0], "ali-to-post") || strcmp(s->argv[0][1], "ark:-") ||
      strcmp(s->argv[0][2], "ark:-"))
    return 0;
  p = bar + 1;
  if ((bar = strchr(p, '|'))) {
    s->argc[1] = words(p, bar, s->argv[1], 8);
    char **w = s->argv[1], *end;
    if (s->argc[1] != 6 || strcmp(w[0], "weight-silence-post") || strcmp(w[4], "ark:-") ||
        strcmp(w[5], "ark:-"))
      return 0;
    int32_t *ph;
    int nph;
    if (gacc_parse_phones(w[2], &ph, &nph) != KIO_OK || nph == 0) return 0;
    free(ph);
    s->scale = strtof(w[1], &end);
    if (end == w[1] || *end) return 0;
    s->wsp = 1;
    *sil = w[2];
    *mdl = w[3];
    p = bar + 1;
  }
  while (*p == ' ' || *p == '\t') p++;
  return *p == '\0';
}

static int load_silence(gacc_post_src *s, const char *mdl, const char *sil) {
  int32_t *phones;
  int n;
  if (gacc_parse_phones(sil, &phones, &n) != KIO_OK) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  int rc = gacc_sil_set_load(&s->sil, mdl, phones, n);
  free(phones);
  return rc;
}

int gacc_post_src_open(gacc_post_src **out, const char *rspecifier) {
  *out = NULL;
  kio_rspec rs;
  const char *colon = strchr(rspecifier, ':');
  if (!kio_setting_flag(KIO_SET_FEATS_PIPE, 1) || !colon ||
      kio_parse_rspecifier(rspecifier, &rs) != KIO_OK || rs.kind != KIO_SPEC_ARCHIVE)
    return 0;
  const char *f = colon + 1, *bar = strchr(f, '|');
  if (!bar || strncmp(f, "gunzip -c ", 10) || strchr(f, '\'') || strchr(f, '"')) return 0;
  gacc_post_src *s = calloc(1, sizeof *s);
  if (!s) return 0;
  const char *mdl = NULL, *sil = NULL;
  if (!parse_stages(s, bar + 1, &mdl, &sil)) {
    gacc_post_src_free(s);
    return 0;
  }
  /* the programs start: their command lines (as ParseOptions prints them) */
  flockfile(stderr);
  for (int k = 1; k >= 0; k--)
    if (s->argc[k]) {
      for (int i = 0; i < s->argc[k]; i++) {
        char *e = kio_escape_arg(s->argv[k][i]);
        fprintf(stderr, "%s ", e ? e : s->argv[k][i]);
        free(e);
      }
      fputc('\n', stderr);
    }
  funlockfile(stderr);
  KIO_VLOG(1, "Posteriors computed in-process: %s", rspecifier);
  char *inner = strndup(rspecifier, (size_t)(bar + 1 - rspecifier));
  int rc = inner ? kio_seq_open(&s->ali, inner, &kio_int_vec_holder) : KIO_ERR;
  free(inner);
  if (rc != KIO_OK || (s->wsp && load_silence(s, mdl, sil) != KIO_OK)) {
    if (s->ali) kio_seq_close(s->ali);
    gacc_post_src_free(s);
    return KIO_ERR;
  }
  *out = s;
  return 1;
}

/* ali-to-post, then weight-silence-post, of the reader's current entry */
static int convert(gacc_post_src *s, const char *key, const kio_int_vec *a, gacc_post *p) {
  if (gacc_post_from_ali(p, a->v, a->n) != KIO_OK) return KIO_ERR;
  return s->wsp ? gacc_post_weight_silence(p, &s->sil, s->scale, 0, key) : KIO_OK;
}

/* The next alignment converted and kept; 0 at the end. */
static int read_next(gacc_post_src *s, entry **e) {
  if (kio_seq_done(s->ali)) return 0;
  const char *key = kio_seq_key(s->ali);
  if (kio_seq_take(s->ali, &s->buf) != KIO_OK) return KIO_ERR;
  s->count++;
  entry *x = find(s, key);  /* a repeated key: Kaldi's reader keeps the first */
  if (!x) {
    if (!(x = insert(s, key))) {
      KIO_ERROR("Out of memory");
      return KIO_ERR;
    }
    if (convert(s, key, &s->buf, &x->p) != KIO_OK) return KIO_ERR;
  }
  kio_seq_next(s->ali);
  *e = x;
  return 1;
}

int gacc_post_src_has_key(gacc_post_src *s, const char *key) {
  if (find(s, key)) return 1;
  for (;;) {
    entry *e;
    int r = read_next(s, &e);
    if (r <= 0) return r;
    if (!strcmp(e->key, key)) return 1;
  }
}

const gacc_post *gacc_post_src_value(gacc_post_src *s, const char *key) {
  entry *e = find(s, key);
  return e ? &e->p : NULL;
}

int gacc_post_src_finish(gacc_post_src *s) {
  entry *e;
  int r;
  while ((r = read_next(s, &e)) > 0) {}
  if (r < 0) return KIO_ERR;
  KIO_KALDI_AS("ali-to-post", ALI_TO_POST_DONE, s->count);
  if (s->wsp) KIO_KALDI_AS("weight-silence-post", WSP_DONE, s->count);
  return KIO_OK;
}

int gacc_post_src_close(gacc_post_src *s) {
  int rc = kio_seq_close(s->ali);
  gacc_post_src_free(s);
  return rc;
}

int gacc_posts_open(gacc_posts_in *in, const char *rspecifier) {
  in->ra = NULL;
  in->src = NULL;
  int r = gacc_post_src_open(&in->src, rspecifier);
  if (r < 0) return KIO_ERR;
  if (r == 0 && kio_ra_open(&in->ra, rspecifier, &gacc_post_holder) != KIO_OK) return KIO_ERR;
  return KIO_OK;
}

int gacc_posts_has_key(gacc_posts_in *in, const char *key) {
  return in->src ? gacc_post_src_has_key(in->src, key) : kio_ra_has_key(in->ra, key);
}

const gacc_post *gacc_posts_value(gacc_posts_in *in, const char *key) {
  return in->src ? gacc_post_src_value(in->src, key) : kio_ra_value(in->ra, key);
}

int gacc_posts_finish(gacc_posts_in *in) {
  return in->src ? gacc_post_src_finish(in->src) : KIO_OK;
}

int gacc_posts_close(gacc_posts_in *in) {
  return in->src ? gacc_post_src_close(in->src) : kio_ra_close(in->ra);
}
