/* Archive entries read ahead on threads for the sequential reader
 * (kio_seq_read_ahead, table.h).
 *
 * One scan of the archive finds where each entry starts: the key and the
 * holder's header (body_bytes), then a seek past the body. The scan is
 * serial (under scan_mu) and cheap; each entry is then parsed whole, by
 * kio_ark_read_entry on the thread's own FILE at that offset, in parallel
 * with the others: the same code as the reader in order, so the same
 * values, the same messages (file positions included) and the same key
 * at an error. An entry whose header does not tell its size (compressed or
 * text matrices, a corrupt header) is read whole under scan_mu, and the
 * scan goes on from where it ended. After an entry that fails or the end
 * of the archive nothing more is scanned.
 *
 * Entries go to a ring of window slots in archive order; a slot's log
 * lines are kept (kio_log_defer) and logged when the consumer reaches it,
 * so lines come out where reading in order prints them, and those of
 * entries past an error never do. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io-internal.h"
#include "base/sys/log.h"
#include "table-internal.h"

enum { SLOT_FREE, SLOT_DONE };

typedef struct {
  int state, status;       /* status: KIO_OK, KIO_EOF, KIO_ERR */
  int later;               /* 1: scanned, to be read at off */
  off_t off;
  char *key;
  size_t keycap;
  void *obj;
  kio_log_deferred *log;
} slot;

struct kio_seq_ahead {
  const kio_holder *h;
  kio_body_bytes_fn body_bytes;
  char *path, *archive;
  pthread_mutex_t mu, scan_mu;
  pthread_cond_t cv;       /* a slot done, a slot freed, stop */
  slot *slots;
  int window, nthreads;
  int64_t next_seq;        /* the next entry to scan (under scan_mu and mu) */
  int64_t consumed;        /* entries the consumer is done with (under mu) */
  int stop;                /* under mu */
  FILE *scan_f;            /* the scan's stream (under scan_mu) */
  int scan_ended;          /* end or error scanned: nothing more (scan_mu) */
  pthread_t *threads;
  int started;
};

/* Scans the entry at scan_f's position into s. Returns 1 when s still has
 * to be read at *off (the scan moved past it), 0 when s is complete
 * (read whole here, the end, or an error). */
static int scan_one(kio_seq_ahead *a, slot *s, off_t *off) {
  FILE *f = a->scan_f;
  *off = ftello(f);
  int r = kio_read_word(f, &s->key, &s->keycap);
  if (r == KIO_EOF && !ferror(f)) {
    s->status = KIO_EOF;
    a->scan_ended = 1;
    return 0;
  }
  int binary = 0;
  int64_t n = -1;
  if (r == KIO_OK) {
    int c = getc_unlocked(f);
    if (c == ' ' || c == '\t') {
      if (!a->h->has_header)  /* the object itself tells its form (FSTs) */
        n = a->body_bytes(f, 1);
      else if (kio_read_header(f, &binary) == KIO_OK)
        n = a->body_bytes(f, binary);
    }
  }
  kio_clear_error();
  if (n >= 0 && fseeko(f, (off_t)n, SEEK_CUR) == 0) return 1;
  /* read whole, in order, from where the entry began */
  clearerr(f);
  if (fseeko(f, *off, SEEK_SET) != 0) {
    s->status = KIO_ERR;
    a->scan_ended = 1;
    return 0;
  }
  kio_log_defer(&s->log);
  s->status = kio_ark_read_entry(f, a->archive, a->h, &s->key, &s->keycap, s->obj);
  kio_log_defer(NULL);
  if (s->status != KIO_OK) a->scan_ended = 1;
  return 0;
}

/* Up to this many bytes of entries (and CHUNK_MAX entries) go to one
 * thread at a time: contiguous, read in one pass on its stream. */
enum { CHUNK_BYTES = 1 << 20, CHUNK_MAX = 64 };

static void *worker(void *arg) {
  kio_seq_ahead *a = arg;
  FILE *f = fopen(a->path, "rb");
  slot *chunk[CHUNK_MAX];
  for (;;) {
    pthread_mutex_lock(&a->scan_mu);
    pthread_mutex_lock(&a->mu);
    while (!a->stop && !a->scan_ended && a->next_seq >= a->consumed + a->window)
      pthread_cond_wait(&a->cv, &a->mu);
    int64_t room = a->consumed + a->window - a->next_seq;
    if (a->stop || a->scan_ended) {
      pthread_mutex_unlock(&a->mu);
      pthread_mutex_unlock(&a->scan_mu);
      break;
    }
    pthread_mutex_unlock(&a->mu);
    /* the scan: entries claimed in order while they are contiguous and
     * sized; one read whole (or the end) closes the chunk */
    int n = 0, later = 1;
    off_t first = -1, end = -1;
    while (later && n < CHUNK_MAX && n < room && (n == 0 || end - first < CHUNK_BYTES)) {
      slot *s = &a->slots[(a->next_seq + n) % a->window];
      later = scan_one(a, s, &s->off);
      s->later = later;
      chunk[n++] = s;
      if (n == 1) first = s->off;
      end = ftello(a->scan_f);
      if (a->scan_ended) break;
    }
    pthread_mutex_lock(&a->mu);
    a->next_seq += n;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_unlock(&a->scan_mu);
    int at = 0;  /* f is at the next entry */
    for (int i = 0; i < n; i++) {
      slot *s = chunk[i];
      if (!s->later) continue;
      kio_log_defer(&s->log);
      if (!f || (!at && fseeko(f, s->off, SEEK_SET) != 0)) {
        KIO_WARN("Error reading archive %s", kio_printable_rx(a->archive));
        s->status = KIO_ERR;
      } else {
        s->status = kio_ark_read_entry(f, a->archive, a->h, &s->key, &s->keycap, s->obj);
      }
      kio_log_defer(NULL);
      at = s->status == KIO_OK;
    }
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < n; i++) chunk[i]->state = SLOT_DONE;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
  }
  if (f) fclose(f);
  return NULL;
}

static void free_ahead(kio_seq_ahead *a) {
  if (a->slots)
    for (int i = 0; i < a->window; i++) {
      kio_obj_delete(a->h, a->slots[i].obj);
      free(a->slots[i].key);
      kio_log_discard(&a->slots[i].log);
    }
  if (a->scan_f) fclose(a->scan_f);
  free(a->slots);
  free(a->threads);
  free(a->path);
  free(a->archive);
  free(a);
}

void kio_ahead_stop(kio_seq_ahead *a) {
  if (!a) return;
  pthread_mutex_lock(&a->mu);
  a->stop = 1;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  for (int i = 0; i < a->started; i++) pthread_join(a->threads[i], NULL);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  pthread_mutex_destroy(&a->scan_mu);
  free_ahead(a);
}

int kio_ahead_start(kio_seq_ahead **pa, const char *path, const char *archive,
                    const kio_holder *h, kio_body_bytes_fn body_bytes, FILE *cur,
                    int threads, int window) {
  *pa = NULL;
  struct stat s1, s2;
  if (!body_bytes || threads < 1 || window < 1 || fstat(fileno(cur), &s1) != 0 ||
      !S_ISREG(s1.st_mode))
    return 0;
  off_t start = ftello(cur);
  kio_seq_ahead *a = calloc(1, sizeof *a);
  if (!a) return 0;
  a->h = h;
  a->body_bytes = body_bytes;
  a->window = window;
  a->path = strdup(path);
  a->archive = strdup(archive);
  a->slots = calloc((size_t)window, sizeof(slot));
  a->threads = calloc((size_t)threads, sizeof(pthread_t));
  /* the scan's own stream on the same file; small buffer: it reads headers */
  a->scan_f = a->path ? fopen(a->path, "rb") : NULL;
  int ok = a->archive && a->slots && a->threads && a->scan_f && start >= 0 &&
           fstat(fileno(a->scan_f), &s2) == 0 && s1.st_dev == s2.st_dev &&
           s1.st_ino == s2.st_ino && setvbuf(a->scan_f, NULL, _IOFBF, 512) == 0 &&
           fseeko(a->scan_f, start, SEEK_SET) == 0;
  for (int i = 0; ok && i < window; i++) ok = (a->slots[i].obj = kio_obj_new(h)) != NULL;
  if (!ok) {
    free_ahead(a);
    return 0;
  }
  pthread_mutex_init(&a->mu, NULL);
  pthread_mutex_init(&a->scan_mu, NULL);
  pthread_cond_init(&a->cv, NULL);
  for (int i = 0; i < threads; i++) {
    if (pthread_create(&a->threads[i], NULL, worker, a) != 0) break;
    a->started++;
  }
  if (!a->started) {
    kio_ahead_stop(a);
    return 0;
  }
  *pa = a;
  return 1;
}

int kio_ahead_next(kio_seq_ahead *a, void *obj, char **key, size_t *keycap) {
  pthread_mutex_lock(&a->mu);
  slot *s = &a->slots[a->consumed % a->window];
  while (s->state != SLOT_DONE) pthread_cond_wait(&a->cv, &a->mu);
  pthread_mutex_unlock(&a->mu);
  kio_log_replay(&s->log);
  int status = s->status;
  size_t kl = strlen(s->key ? s->key : "") + 1;
  if (kl > *keycap) {
    char *k = realloc(*key, kl);
    if (!k) status = KIO_ERR;
    else *key = k, *keycap = kl;
  }
  if (kl <= *keycap) memcpy(*key, s->key ? s->key : "", kl);
  /* the value to the reader's object; the slot keeps the old buffers */
  if (status == KIO_OK) kio_obj_swap(obj, s->obj, a->h->obj_size);
  pthread_mutex_lock(&a->mu);
  s->state = SLOT_FREE;
  a->consumed++;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  return status;
}
