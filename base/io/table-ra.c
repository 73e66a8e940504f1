/* Random-access table readers (reference 1.10): scp (sorted index, lazy
 * loading), unsorted archive (hash map, reads ahead as needed), sorted
 * archive ("s"), doubly sorted archive ("s,cs": one object kept).
 *
 * Where Kaldi throws (duplicate key, order violations, bad key, a failed
 * Value()), we log one ERROR and enter a fatal state: has_key returns KIO_ERR
 * and value NULL from then on, close returns KIO_ERR.
 *
 * Sorted archives ("s", "s,cs"), "bg" and, when asked (kio_ra_read_ahead),
 * unsorted ones read ahead: a thread reads entries
 * in order into a small queue (objects recycled), so parsing overlaps the
 * caller's work; read_next() then only takes the next queued entry, so the
 * lookup logic and its errors are the same. The thread stops at EOF or at the
 * first read error (reported only if the caller gets that far, as before);
 * close stops it before closing the stream.
 *
 * Opened with kio_ra_open_ahead, an archive in a regular file is instead
 * parsed ahead on several threads by entry boundaries (table-ahead.c, as
 * kio_seq_read_ahead): entries still come to read_next in archive order,
 * with the same values, lines and point of error. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io-internal.h"
#include "base/sys/log.h"
#include "table-internal.h"

enum { M_SCP, M_UNSORTED, M_SORTED, M_DSORTED };
enum { A_NO_OBJECT, A_HAVE_OBJECT, A_EOF, A_ERROR };

typedef struct { char *key; void *obj; char *rest; } entry;

/* Read-ahead queue: a ring of entries read by the thread (RA_QUEUE: ~2.7 MB
 * of 40-dim features of 3.5 s utterances). A slot outside
 * [head, head+count) belongs to the thread, so it fills it unlocked. */
enum { RA_QUEUE = 48 };
typedef struct {
  char *key;
  size_t keycap;
  void *obj;
  int ret;
  kio_log_deferred *logs;  /* what reading it logged: printed when consumed */
} ra_item;
typedef struct {
  pthread_t tid;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  ra_item q[RA_QUEUE];
  size_t head, count;
  void *free_obj[RA_QUEUE + 2];  /* objects given back by the consumer */
  size_t nfree;
  int stop, done;
  FILE *f;
  kio_input *take_in;  /* see kio_ra_reader.take_in */
  const char *filename;
  const kio_holder *h;
} ra_ahead;

struct kio_ra_reader {
  const kio_holder *h;
  kio_rspec spec;
  char *rspecifier;
  int mode, fatal;
  /* archives */
  kio_input *in;
  int state;
  char *cur_key;
  size_t cur_keycap;
  void *cur_obj;          /* object just read (DSORTED: the current one) */
  int cur_taken;          /* DSORTED: cur_obj was handed out by kio_ra_take */
  char *err_key;
  entry *tab;             /* UNSORTED: hash table; SORTED: array in order; SCP: index */
  size_t cap, n;
  long pending;           /* index whose object is freed on the next call ("o") */
  long last_found;        /* SORTED */
  char *last_requested;   /* DSORTED */
  ra_ahead *ahead;        /* read-ahead thread, or NULL */
  kio_seq_ahead *mt;      /* entries parsed ahead on threads, or NULL */
  /* Float matrices from our own feature chain: taken as they are, not
   * written as archive bytes and parsed back (the same values; as the
   * sequential reader does). For one process over 100 h the bytes' round
   * trip on the read-ahead thread was most of the features' time. */
  kio_input *take_in;
  /* scp */
  kio_input *data_in;
  void *obj;
  char *loaded_rx, *loaded_range;
  char *line;
  size_t linecap;
};

static void fatal(kio_ra_reader *r) { r->fatal = 1; }

/* ---- archive reading ---- */

static void *ahead_main(void *arg) {
  ra_ahead *a = arg;
  pthread_mutex_lock(&a->mu);
  for (;;) {
    while (!a->stop && a->count == RA_QUEUE) pthread_cond_wait(&a->cv, &a->mu);
    if (a->stop) break;
    ra_item *it = &a->q[(a->head + a->count) % RA_QUEUE];
    void *obj = a->nfree ? a->free_obj[--a->nfree] : NULL;
    pthread_mutex_unlock(&a->mu);
    if (!obj) obj = kio_obj_new(a->h);
    it->obj = obj;
    kio_log_defer(&it->logs);
    it->ret = !obj     ? KIO_ERR
              : a->take_in ? kio_input_take(a->take_in, &it->key, &it->keycap, obj)
                        : kio_ark_read_entry(a->f, a->filename, a->h, &it->key, &it->keycap, obj);
    kio_log_defer(NULL);
    pthread_mutex_lock(&a->mu);
    a->count++;
    pthread_cond_broadcast(&a->cv);
    if (it->ret != KIO_OK) break;
  }
  a->done = 1;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

/* Starts the thread; on failure the reader just reads in the caller. */
static void ahead_start(kio_ra_reader *r) {
  ra_ahead *a = calloc(1, sizeof *a);
  if (!a) return;
  a->f = kio_input_stream(r->in);
  a->take_in = r->take_in;
  a->filename = r->spec.filename;
  a->h = r->h;
  if (pthread_mutex_init(&a->mu, NULL)) { free(a); return; }
  if (pthread_cond_init(&a->cv, NULL)) {
    pthread_mutex_destroy(&a->mu);
    free(a);
    return;
  }
  if (pthread_create(&a->tid, NULL, ahead_main, a)) {
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
    return;
  }
  r->ahead = a;
}

/* Stops and joins the thread (it may finish the entry it is reading) and
 * frees what was queued but never consumed. */
static void ahead_stop(kio_ra_reader *r) {
  ra_ahead *a = r->ahead;
  if (!a) return;
  pthread_mutex_lock(&a->mu);
  a->stop = 1;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  pthread_join(a->tid, NULL);
  for (size_t i = 0; i < RA_QUEUE; i++) {
    if (a->q[i].obj) kio_obj_delete(r->h, a->q[i].obj);
    free(a->q[i].key);
    kio_log_discard(&a->q[i].logs);  /* never reached by the caller: not reported */
  }
  for (size_t i = 0; i < a->nfree; i++) kio_obj_delete(r->h, a->free_obj[i]);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  free(a);
  r->ahead = NULL;
}

/* read_next with read-ahead: gives cur_obj back and takes the next entry. */
static void ahead_next(kio_ra_reader *r) {
  ra_ahead *a = r->ahead;
  void *give = r->cur_obj;
  r->cur_obj = NULL;
  pthread_mutex_lock(&a->mu);
  if (give) {
    if (a->nfree < RA_QUEUE + 2) a->free_obj[a->nfree++] = give, give = NULL;
  }
  while (a->count == 0 && !a->done) pthread_cond_wait(&a->cv, &a->mu);
  int ret = KIO_ERR;
  kio_log_deferred *logs = NULL;
  if (a->count > 0) {
    ra_item *it = &a->q[a->head];
    char *k = r->cur_key;
    size_t kc = r->cur_keycap;
    r->cur_key = it->key;
    r->cur_keycap = it->keycap;
    it->key = k;
    it->keycap = kc;
    r->cur_obj = it->obj;
    it->obj = NULL;
    ret = it->ret;
    logs = it->logs;
    it->logs = NULL;
    a->head = (a->head + 1) % RA_QUEUE;
    a->count--;
    /* The reader waits while the queue is full; waking it only once the
     * queue is half empty lets it read in bursts instead of one entry per
     * wake-up. */
    if (a->count == RA_QUEUE / 2) pthread_cond_broadcast(&a->cv);
  }
  pthread_mutex_unlock(&a->mu);
  if (give) kio_obj_delete(r->h, give);
  kio_log_replay(&logs);
  r->cur_taken = 0;
  if (ret == KIO_OK) {
    r->state = A_HAVE_OBJECT;
  } else if (ret == KIO_EOF) {
    r->state = A_EOF;
  } else {
    r->state = A_ERROR;
    free(r->err_key);
    r->err_key = r->cur_key ? strdup(r->cur_key) : NULL;
  }
}

/* Reads the next archive entry into cur_key/cur_obj; sets state. */
static void read_next(kio_ra_reader *r) {
  if (r->ahead) {
    ahead_next(r);
    return;
  }
  if (!r->cur_obj && !(r->cur_obj = kio_obj_new(r->h))) {
    r->state = A_ERROR;
    return;
  }
  r->cur_taken = 0;
  int ret = r->mt        ? kio_ahead_next(r->mt, r->cur_obj, &r->cur_key, &r->cur_keycap)
            : r->take_in ? kio_input_take(r->take_in, &r->cur_key, &r->cur_keycap, r->cur_obj)
                         : kio_ark_read_entry(kio_input_stream(r->in), r->spec.filename, r->h,
                                              &r->cur_key, &r->cur_keycap, r->cur_obj);
  if (ret == KIO_OK) {
    r->state = A_HAVE_OBJECT;
  } else if (ret == KIO_EOF) {
    r->state = A_EOF;
  } else {
    r->state = A_ERROR;
    free(r->err_key);
    r->err_key = r->cur_key ? strdup(r->cur_key) : NULL;
  }
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

/* Slot of key in the hash table, or of the empty slot where it belongs. */
static size_t hash_slot(const kio_ra_reader *r, const char *key) {
  size_t i = (size_t)hash_str(key) & (r->cap - 1);
  while (r->tab[i].key && strcmp(r->tab[i].key, key)) i = (i + 1) & (r->cap - 1);
  return i;
}

static int hash_grow(kio_ra_reader *r) {
  size_t oldcap = r->cap;
  entry *old = r->tab;
  r->cap = oldcap ? oldcap * 2 : 64;
  r->tab = calloc(r->cap, sizeof *r->tab);
  if (!r->tab) { r->tab = old; r->cap = oldcap; return KIO_ERR; }
  for (size_t i = 0; i < oldcap; i++)
    if (old[i].key) r->tab[hash_slot(r, old[i].key)] = old[i];
  free(old);
  return KIO_OK;
}

static void handle_pending_delete(kio_ra_reader *r) {
  if (r->pending < 0) return;
  kio_obj_delete(r->h, r->tab[r->pending].obj);
  r->tab[r->pending].obj = NULL; /* key kept: remembers it was used */
  r->pending = -1;
}

/* UNSORTED: returns index of key or -1 (absent) / -2 (fatal). */
static long unsorted_find(kio_ra_reader *r, const char *key) {
  if (r->cap) {
    size_t i = hash_slot(r, key);
    if (r->tab[i].key) {
      if (!r->tab[i].obj) {
        KIO_ERROR("You specified the once (o) option but you are calling using key %s "
                  "more than once: rspecifier is %s", key, r->rspecifier);
        return -2;
      }
      return (long)i;
    }
  }
  while (r->state == A_NO_OBJECT) {
    read_next(r);
    if (r->state != A_HAVE_OBJECT) break;
    r->state = A_NO_OBJECT;
    if ((r->n + 1) * 2 > r->cap && hash_grow(r) != KIO_OK) return -2;
    size_t i = hash_slot(r, r->cur_key);
    if (r->tab[i].key) {
      KIO_ERROR("Error in RandomAccessTableReader: duplicate key %s in archive %s",
                r->cur_key, kio_printable_rx(r->spec.filename));
      return -2;
    }
    if (!(r->tab[i].key = strdup(r->cur_key))) return -2;
    r->tab[i].obj = r->cur_obj;
    r->cur_obj = NULL;
    r->n++;
    if (!strcmp(r->tab[i].key, key)) return (long)i;
  }
  return -1;
}

/* SORTED: returns index of key or -1 / -2. */
static long sorted_find(kio_ra_reader *r, const char *key) {
  if (r->last_found >= 0 && (size_t)r->last_found < r->n &&
      !strcmp(r->tab[r->last_found].key, key))
    return r->last_found;
  int looped = 0;
  while (r->state == A_NO_OBJECT && (r->n == 0 || strcmp(key, r->tab[r->n - 1].key) > 0)) {
    looped = 1;
    read_next(r);
    if (r->state != A_HAVE_OBJECT) break;
    r->state = A_NO_OBJECT;
    if (r->n > 0 && strcmp(r->cur_key, r->tab[r->n - 1].key) <= 0) {
      KIO_ERROR("You provided the sorted (s) option but keys in archive %s are not in "
                "sorted order: %s is followed by %s", kio_printable_rx(r->spec.filename),
                r->tab[r->n - 1].key, r->cur_key);
      return -2;
    }
    if (r->n == r->cap) {
      size_t nc = r->cap ? r->cap * 2 : 64;
      entry *nt = realloc(r->tab, nc * sizeof *nt);
      if (!nt) return -2;
      r->tab = nt;
      r->cap = nc;
    }
    entry *e = &r->tab[r->n];
    if (!(e->key = strdup(r->cur_key))) return -2;
    e->obj = r->cur_obj;
    e->rest = NULL;
    r->cur_obj = NULL;
    r->n++;
  }
  if (looped) {
    if (r->n > 0 && !strcmp(r->tab[r->n - 1].key, key)) return r->last_found = (long)r->n - 1;
    return -1;
  }
  size_t lo = 0, hi = r->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (strcmp(r->tab[mid].key, key) < 0) lo = mid + 1;
    else hi = mid;
  }
  if (lo < r->n && !strcmp(r->tab[lo].key, key)) return r->last_found = (long)lo;
  return -1;
}

/* DSORTED: 1 if the current object is key, 0 if absent, -2 fatal. */
static int dsorted_find(kio_ra_reader *r, const char *key) {
  if (r->last_requested && strcmp(key, r->last_requested) < 0) {
    KIO_ERROR("You provided the \"cs\" option but are not calling with keys in sorted "
              "order: %s < %s: rspecifier is %s", key, r->last_requested, r->rspecifier);
    return -2;
  }
  char *lr = strdup(key);
  if (!lr) return -2;
  free(r->last_requested);
  r->last_requested = lr;
  if (r->state == A_NO_OBJECT) read_next(r);
  if (r->state != A_HAVE_OBJECT) return 0;
  for (;;) {
    int cmp = strcmp(key, r->cur_key);
    if (cmp == 0 && r->cur_taken) {
      KIO_ERROR("Object for key %s was taken already: rspecifier is %s", key, r->rspecifier);
      return -2;
    }
    if (cmp == 0) return 1;
    if (cmp < 0) return 0;
    char *last = strdup(r->cur_key);
    if (!last) return -2;
    read_next(r);
    if (r->state != A_HAVE_OBJECT) { free(last); return 0; }
    if (strcmp(r->cur_key, last) <= 0) {
      KIO_ERROR("You provided the \"s\" option  (sorted order), but keys are out of order "
                "or duplicated: %s is followed by %s: rspecifier is %s", last, r->cur_key,
                r->rspecifier);
      free(last);
      return -2;
    }
    free(last);
  }
}

/* ---- scp ---- */

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const entry *)a)->key, ((const entry *)b)->key);
}

static int scp_open(kio_ra_reader *r) {
  const char *name = kio_printable_rx(r->spec.filename);
  kio_input *in = NULL;
  int binary;
  kio_clear_error();
  if (kio_input_reopen_q(&in, r->spec.filename, &binary, 1) != KIO_OK) {
    KIO_WARN("Error opening script file: %s (%s)", name, kio_last_error());
    return KIO_ERR;
  }
  if (binary) {
    KIO_WARN("Error: script file appears to be binary: %s", name);
    kio_input_close(in);
    return KIO_ERR;
  }
  int ret, lineno = 0;
  char *key, *rest;
  while ((ret = kio_scp_next_line(kio_input_stream(in), &r->line, &r->linecap, &key,
                                  &rest)) == KIO_OK) {
    lineno++;
    if (r->n == r->cap) {
      size_t nc = r->cap ? r->cap * 2 : 256;
      entry *nt = realloc(r->tab, nc * sizeof *nt);
      if (!nt) { ret = KIO_ERR; break; }
      r->tab = nt;
      r->cap = nc;
    }
    entry *e = &r->tab[r->n];
    e->obj = NULL;
    e->key = strdup(key);
    e->rest = strdup(rest);
    r->n++;
    if (!e->key || !e->rest) { ret = KIO_ERR; break; }
  }
  int pipe_failed = kio_input_close(in) != KIO_OK;
  if (ret != KIO_EOF || pipe_failed) {
    if (ret == KIO_ERR && r->line)
      KIO_WARN("Invalid %d'th line in script file:\"%s\"", lineno + 1, r->line);
    KIO_WARN("[script file was: %s]", name);
    return KIO_ERR;
  }
  if (!r->spec.sorted) qsort(r->tab, r->n, sizeof *r->tab, cmp_entry);
  for (size_t i = 0; i + 1 < r->n; i++) {
    int c = strcmp(r->tab[i].key, r->tab[i + 1].key);
    if (c >= 0) {
      KIO_WARN("Script file %s %s%s", name,
               c == 0 ? "contains duplicate key: "
                      : "is not sorted (remove s, option or add ns, option): key is ",
               r->tab[i].key);
      return KIO_ERR;
    }
  }
  return (r->obj = kio_obj_new(r->h)) ? KIO_OK : KIO_ERR;
}

static long scp_find(const kio_ra_reader *r, const char *key) {
  size_t lo = 0, hi = r->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (strcmp(r->tab[mid].key, key) < 0) lo = mid + 1;
    else hi = mid;
  }
  return (lo < r->n && !strcmp(r->tab[lo].key, key)) ? (long)lo : -1;
}

static int scp_load(kio_ra_reader *r, long idx) {
  char *rx, *range;
  if (kio_scp_split_range(r->tab[idx].rest, &rx, &range) != KIO_OK) {
    KIO_WARN("Reading rspecifier '%s', cannot make sense of scp line %s %s",
             r->rspecifier, r->tab[idx].key, r->tab[idx].rest);
    return KIO_ERR;
  }
  if (r->loaded_rx && !strcmp(r->loaded_rx, rx) && !strcmp(r->loaded_range, range)) {
    free(rx);
    free(range);
    return KIO_OK;
  }
  free(r->loaded_rx);
  free(r->loaded_range);
  r->loaded_rx = r->loaded_range = NULL;
  if (kio_scp_load(&r->data_in, rx, range, r->h, r->obj) != KIO_OK) {
    free(rx);
    free(range);
    return KIO_ERR;
  }
  r->loaded_rx = rx;
  r->loaded_range = range;
  return KIO_OK;
}

/* ---- public ---- */

/* threads > 0: archives in a regular file parsed ahead on threads. */
static int ra_open(kio_ra_reader **pr, const char *rspecifier, const kio_holder *h,
                   kio_body_bytes_fn body_bytes, int threads, int window) {
  *pr = NULL;
  kio_ra_reader *r = calloc(1, sizeof *r);
  if (!r) return KIO_ERR;
  r->h = h;
  r->pending = r->last_found = -1;
  r->rspecifier = strdup(rspecifier ? rspecifier : "");
  if (!r->rspecifier || kio_parse_rspecifier(rspecifier, &r->spec) != KIO_OK) goto fail;
  if (r->spec.kind == KIO_SPEC_SCRIPT) {
    r->mode = M_SCP;
    if (scp_open(r) != KIO_OK) goto fail;
  } else {
    r->mode = !r->spec.sorted ? M_UNSORTED : r->spec.called_sorted ? M_DSORTED : M_SORTED;
    kio_clear_error();
    if (kio_input_reopen_q(&r->in, r->spec.filename, NULL, 1) != KIO_OK) {
      KIO_WARN("Failed to open stream %s (%s)", kio_printable_rx(r->spec.filename),
               kio_last_error());
      goto fail;
    }
    r->state = A_NO_OBJECT;
    if (kio_input_can_take(r->in, h)) r->take_in = r->in;
    /* kio_ahead_start declines what it cannot read at offsets (not a
     * regular file): then the one thread, as without threads */
    if (threads > 0 && !r->take_in && kio_classify_rxfilename(r->spec.filename) == KIO_RX_FILE)
      kio_ahead_start(&r->mt, r->spec.filename, r->spec.filename, h, body_bytes,
                      kio_input_stream(r->in), threads, window);
    if (!r->mt && (threads > 0 || r->spec.sorted || r->spec.background)) ahead_start(r);
  }
  *pr = r;
  return KIO_OK;
fail:
  KIO_ERROR("Error opening RandomAccessTableReader object (rspecifier is: %s)",
            rspecifier);
  r->fatal = 1;
  kio_ra_close(r);
  return KIO_ERR;
}

int kio_ra_open(kio_ra_reader **r, const char *rspecifier, const kio_holder *h) {
  return ra_open(r, rspecifier, h, NULL, 0, 0);
}

int kio_ra_open_ahead(kio_ra_reader **r, const char *rspecifier, const kio_holder *h,
                      kio_body_bytes_fn body_bytes, int threads, int window) {
  return ra_open(r, rspecifier, h, body_bytes, threads, window);
}

int kio_ra_reads_ahead(const kio_ra_reader *r) {
  return !r ? 0 : r->mt ? 2 : r->ahead ? 1 : 0;
}

int kio_ra_read_ahead(kio_ra_reader *r) {
  if (!r || r->fatal || r->mode != M_UNSORTED || r->ahead || r->mt || r->n || r->cur_obj) return 0;
  ahead_start(r);
  return r->ahead != NULL;
}

int kio_ra_has_key(kio_ra_reader *r, const char *key) {
  if (!r || r->fatal) return KIO_ERR;
  if (!kio_is_token(key)) {
    KIO_ERROR("Invalid key \"%s\"", key ? key : "");
    fatal(r);
    return KIO_ERR;
  }
  long i;
  switch (r->mode) {
    case M_SCP:
      i = scp_find(r, key);
      if (i < 0) return 0;
      if (r->spec.permissive) return scp_load(r, i) == KIO_OK;
      return 1;
    case M_UNSORTED:
      handle_pending_delete(r);
      i = unsorted_find(r, key);
      break;
    case M_SORTED:
      handle_pending_delete(r);
      i = sorted_find(r, key);
      if (i >= 0 && r->spec.once && !r->tab[i].obj) {
        KIO_ERROR("Error: HasKey called after Value() already called for  that key, and "
                  "once (o) option specified: rspecifier is %s", r->rspecifier);
        i = -2;
      }
      break;
    default:
      i = dsorted_find(r, key);
      if (i == 1) i = 0;
      else if (i == 0) i = -1;
      break;
  }
  if (i == -2) {
    fatal(r);
    return KIO_ERR;
  }
  return i >= 0;
}

void *kio_ra_value(kio_ra_reader *r, const char *key) {
  if (!r || r->fatal) return NULL;
  if (!kio_is_token(key)) {
    KIO_ERROR("Invalid key \"%s\"", key ? key : "");
    fatal(r);
    return NULL;
  }
  long i;
  void *obj = NULL;
  switch (r->mode) {
    case M_SCP:
      i = scp_find(r, key);
      if (i < 0 || scp_load(r, i) != KIO_OK) {
        KIO_ERROR("Could not get item for key %s, rspecifier is %s [to ignore this, add "
                  "the p, (permissive) option to the rspecifier.", key, r->rspecifier);
        fatal(r);
        return NULL;
      }
      return r->obj;
    case M_UNSORTED:
    case M_SORTED:
      handle_pending_delete(r);
      i = r->mode == M_UNSORTED ? unsorted_find(r, key) : sorted_find(r, key);
      if (i >= 0 && !r->tab[i].obj) {
        KIO_ERROR("Error: Value() called more than once for key %s and once (o) option "
                  "specified: rspecifier is %s", key, r->rspecifier);
        i = -2;
      }
      if (i >= 0) {
        obj = r->tab[i].obj;
        if (r->spec.once) r->pending = i;
      }
      break;
    default:
      i = dsorted_find(r, key);
      if (i == 1) obj = r->cur_obj;
      else if (i == 0) i = -1;
      break;
  }
  if (i == -1) {
    KIO_ERROR("Value() called but no such key %s in archive %s", key,
              kio_printable_rx(r->spec.filename));
    i = -2;
  }
  if (i == -2) {
    fatal(r);
    return NULL;
  }
  return obj;
}


int kio_ra_take(kio_ra_reader *r, const char *key, void *obj) {
  if (r && !r->fatal && r->mode != M_SCP && r->mode != M_DSORTED) return 1;
  void *v = kio_ra_value(r, key);
  if (!v) return KIO_ERR;
  kio_obj_swap(v, obj, r->h->obj_size);
  if (r->mode == M_SCP) {  /* r->obj no longer holds the loaded entry */
    free(r->loaded_rx);
    free(r->loaded_range);
    r->loaded_rx = r->loaded_range = NULL;
  } else {
    r->cur_taken = 1;
  }
  return KIO_OK;
}

void kio_ra_pipe_failed_error(const char *rspecifier) {
  kio_logf(KIO_LOG_ERROR, "kio_ra_close", __FILE__, __LINE__,
           "Error closing RandomAccessTableReader: rspecifier is %s (input pipe failed)",
           rspecifier);
}

int kio_ra_close(kio_ra_reader *r) {
  if (!r) return KIO_OK;
  int ret = r->fatal ? KIO_ERR : KIO_OK;
  /* A read error counts; so does a failed pipe read to its end (its output
   * may be cut short: Kaldi only warns). A pipe closed before its end may
   * have died of SIGPIPE: not an error. Whether the caller stopped at the
   * end is found by reading one entry further (silently: errors past what
   * the caller asked for are not reported). */
  if (!r->fatal && r->mode != M_SCP && kio_input_is_pipe(r->in) &&
      (r->state == A_NO_OBJECT || r->state == A_HAVE_OBJECT)) {
    kio_log_deferred *quiet = NULL;
    kio_log_defer(&quiet);
    read_next(r);
    kio_log_defer(NULL);
    kio_log_discard(&quiet);
    if (r->state == A_ERROR) r->state = A_NO_OBJECT;
  }
  ahead_stop(r);
  kio_ahead_stop(r->mt);
  r->mt = NULL;
  int pipe_failed = kio_input_close(r->in) != KIO_OK;
  kio_input_close(r->data_in);
  if (!r->fatal && r->state == A_EOF && pipe_failed && !r->spec.permissive) {
    kio_ra_pipe_failed_error(r->rspecifier);
    ret = KIO_ERR;
  }
  if (!r->fatal && r->state == A_ERROR) {
    if (r->spec.permissive) {
      KIO_WARN("Error state detected closing reader.  Ignoring it because you "
               "specified permissive mode.");
    } else {
      KIO_ERROR("Error closing RandomAccessTableReader: rspecifier is %s (read error in "
                "archive %s at key %s)", r->rspecifier, kio_printable_rx(r->spec.filename),
                r->err_key ? r->err_key : "?");
      ret = KIO_ERR;
    }
  }
  for (size_t i = 0; i < (r->mode == M_UNSORTED ? r->cap : r->n); i++) {
    free(r->tab[i].key);
    free(r->tab[i].rest);
    if (r->tab[i].obj) kio_obj_delete(r->h, r->tab[i].obj);
  }
  free(r->tab);
  if (r->cur_obj) kio_obj_delete(r->h, r->cur_obj);
  if (r->obj) kio_obj_delete(r->h, r->obj);
  free(r->cur_key);
  free(r->err_key);
  free(r->last_requested);
  free(r->rspecifier);
  free(r->loaded_rx);
  free(r->loaded_range);
  free(r->line);
  free(r);
  return ret;
}
