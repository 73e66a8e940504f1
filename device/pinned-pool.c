/* The pool of page-locked host blocks (pinned-pool.h). */
#include "pinned-pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"

enum { HDR = 64, MIN_SHIFT = 16, MAX_CLASSES = 48, CACHE_N = 256 };
#define MAGIC UINT64_C(0x6b696f50696e6e64)

/* Before each block's bytes; cls < 0: a large block of the backend's own. */
typedef struct blk {
  uint64_t magic;
  size_t size;  /* the whole block, header included */
  int32_t cls, slab;
  struct blk *next;  /* on its free list */
} blk;
_Static_assert(sizeof(blk) <= HDR, "block header too large");

typedef struct { char *base; size_t size, used; int live; } slab_t;
/* cls of a large block that has a whole empty slab to itself */
enum { CLS_DRIVER = -1, CLS_SLAB = -2 };

struct kio_pinned_pool {
  pthread_mutex_t mu;
  kio_pinned_backend be;
  size_t slab, next_slab, cache_limit, reserve;
  int max_shift;  /* the largest class: a quarter of a slab */
  blk *free_list[MAX_CLASSES];
  slab_t *slabs;
  int nslabs, cap_slabs;
  blk *cache[CACHE_N];
  int ncache;
  kio_pinned_stats st;
};

static int shift_of(size_t bytes) {
  int s = 0;
  while (s < 63 && ((size_t)1 << s) < bytes) s++;
  return s;
}

kio_pinned_pool *kio_pinned_pool_new(kio_pinned_backend be, size_t slab, size_t cache_limit) {
  if (!be.alloc || !be.free || slab < ((size_t)1 << 20) || (slab & (slab - 1))) return NULL;
  kio_pinned_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  pthread_mutex_init(&p->mu, NULL);
  p->be = be;
  p->slab = slab;
  /* the first slabs smaller: a process that pins little pins little */
  p->next_slab = slab / 8 > ((size_t)1 << 20) ? slab / 8 : ((size_t)1 << 20);
  p->cache_limit = cache_limit;
  p->max_shift = shift_of(slab) - 2;
  if (p->max_shift - MIN_SHIFT >= MAX_CLASSES) p->max_shift = MIN_SHIFT + MAX_CLASSES - 1;
  return p;
}

static void *backend_alloc(kio_pinned_pool *p, size_t bytes) {
  double t0 = kio_now_s();
  void *b = p->be.alloc(bytes);
  p->st.driver_allocs++;
  p->st.driver_alloc_s += kio_now_s() - t0;
  return b;
}

static void backend_free(kio_pinned_pool *p, void *b) {
  double t0 = kio_now_s();
  p->be.free(b);
  p->st.driver_frees++;
  p->st.driver_free_s += kio_now_s() - t0;
}

/* An unused entry of the slab table: its index, or -1. */
static int new_slab_index(kio_pinned_pool *p) {
  for (int i = 0; i < p->nslabs; i++)
    if (!p->slabs[i].base) return i;
  if (p->nslabs == p->cap_slabs) {
    int nc = p->cap_slabs ? 2 * p->cap_slabs : 8;
    slab_t *s = realloc(p->slabs, (size_t)nc * sizeof *s);
    if (!s) return -1;
    p->slabs = s;
    p->cap_slabs = nc;
  }
  p->slabs[p->nslabs].base = NULL;
  return p->nslabs++;
}

/* Room for size bytes in a slab (a new one if none has it): its index and
 * offset, or -1. */
static int carve(kio_pinned_pool *p, size_t size, size_t *off) {
  int empty = -1, fresh = -1;
  for (int i = 0; i < p->nslabs; i++) {
    if (!p->slabs[i].base) {
      if (empty < 0) empty = i;
      continue;
    }
    if (p->slabs[i].size - p->slabs[i].used < size) continue;
    if (p->slabs[i].used == 0) {  /* untouched slabs last: a large block may want one */
      if (fresh < 0) fresh = i;
      continue;
    }
    *off = p->slabs[i].used;
    p->slabs[i].used += size;
    return i;
  }
  if (fresh >= 0) {
    *off = 0;
    p->slabs[fresh].used = size;
    return fresh;
  }
  if (empty < 0) empty = new_slab_index(p);
  if (empty < 0) return -1;
  size_t ssize = p->next_slab >= size ? p->next_slab : size;
  char *b = backend_alloc(p, ssize);
  if (!b) return -1;
  if (p->next_slab < p->slab) p->next_slab *= 2;
  p->slabs[empty] = (slab_t){b, ssize, size, 0};
  p->st.slab_bytes += ssize;
  p->st.slabs++;
  *off = 0;
  return empty;
}

static void *large_alloc(kio_pinned_pool *p, size_t need) {
  /* an empty slab (one pinned ahead, kio_pinned_grow) holds it whole */
  int whole = -1;
  for (int i = 0; i < p->nslabs; i++) {
    const slab_t *sl = &p->slabs[i];
    if (sl->base && sl->used == 0 && sl->live == 0 && sl->size >= need &&
        (whole < 0 || sl->size < p->slabs[whole].size))
      whole = i;
  }
  if (whole >= 0) {
    slab_t *sl = &p->slabs[whole];
    blk *b = (blk *)(void *)sl->base;
    sl->used = sl->size;
    sl->live = 1;
    b->magic = MAGIC;
    b->size = sl->size;
    b->cls = CLS_SLAB;
    b->slab = whole;
    p->st.in_use += b->size;
    return (char *)b + HDR;
  }
  int best = -1;
  for (int i = 0; i < p->ncache; i++)
    if (p->cache[i]->size >= need && p->cache[i]->size <= 2 * need &&
        (best < 0 || p->cache[i]->size < p->cache[best]->size))
      best = i;
  blk *b;
  if (best >= 0) {
    b = p->cache[best];
    p->cache[best] = p->cache[--p->ncache];
    p->st.cached -= b->size;
  } else {
    size_t size = (size_t)1 << shift_of(need);
    if (size < need) size = need;
    b = backend_alloc(p, size);
    if (!b) return NULL;
    b->size = size;
  }
  b->magic = MAGIC;
  b->cls = CLS_DRIVER;
  b->slab = -1;
  p->st.large_allocs += best < 0;
  p->st.in_use += b->size;
  return (char *)b + HDR;
}

void *kio_pinned_alloc(kio_pinned_pool *p, size_t bytes) {
  if (!p || bytes > SIZE_MAX / 4) return NULL;
  const size_t need = bytes + HDR;
  pthread_mutex_lock(&p->mu);
  int s = shift_of(need);
  if (s < MIN_SHIFT) s = MIN_SHIFT;
  void *out = NULL;
  if (s > p->max_shift) {
    out = large_alloc(p, need);
  } else {
    const int c = s - MIN_SHIFT;
    const size_t size = (size_t)1 << s;
    blk *b = p->free_list[c];
    if (b) {
      p->free_list[c] = b->next;
    } else {
      size_t off;
      int si = carve(p, size, &off);
      if (si >= 0) {
        b = (blk *)(void *)(p->slabs[si].base + off);
        b->size = size;
        b->cls = c;
        b->slab = si;
      }
    }
    if (b) {
      b->magic = MAGIC;
      b->next = NULL;
      p->slabs[b->slab].live++;
      p->st.in_use += size;
      out = (char *)b + HDR;
    }
  }
  pthread_mutex_unlock(&p->mu);
  return out;
}

void kio_pinned_release(kio_pinned_pool *p, void *ptr) {
  if (!p || !ptr) return;
  blk *b = (blk *)(void *)((char *)ptr - HDR);
  pthread_mutex_lock(&p->mu);
  if (b->magic != MAGIC) {  /* not a block of this pool, or freed twice: kept */
    pthread_mutex_unlock(&p->mu);
    KIO_ERROR("Internal error: a page-locked block freed twice or not ours");
    return;
  }
  b->magic = 0;
  p->st.in_use -= b->size;
  if (b->cls >= 0) {
    b->next = p->free_list[b->cls];
    p->free_list[b->cls] = b;
    p->slabs[b->slab].live--;
  } else if (b->cls == CLS_SLAB) {
    p->slabs[b->slab].live = 0;
    p->slabs[b->slab].used = 0;
  } else if (p->ncache < CACHE_N && p->st.cached + b->size <= p->cache_limit) {
    p->cache[p->ncache++] = b;
    p->st.cached += b->size;
  } else {
    backend_free(p, b);
  }
  pthread_mutex_unlock(&p->mu);
}

void kio_pinned_trim(kio_pinned_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->ncache; i++) backend_free(p, p->cache[i]);
  p->ncache = 0;
  p->st.cached = 0;
  /* the smaller (first) slabs go first; the reserve's bytes stay */
  for (int si = 0; si < p->nslabs; si++) {
    if (!p->slabs[si].base || p->slabs[si].live) continue;
    if (p->st.slab_bytes - p->slabs[si].size < p->reserve) continue;
    for (int c = 0; c < MAX_CLASSES; c++) {  /* its blocks off the free lists */
      blk **link = &p->free_list[c];
      while (*link) {
        if ((*link)->slab == si) *link = (*link)->next;
        else link = &(*link)->next;
      }
    }
    backend_free(p, p->slabs[si].base);
    p->slabs[si].base = NULL;
    p->slabs[si].used = 0;
    p->st.slab_bytes -= p->slabs[si].size;
    p->st.slabs--;
  }
  pthread_mutex_unlock(&p->mu);
}

void kio_pinned_set_reserve(kio_pinned_pool *p, size_t bytes) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->reserve = bytes;
  p->st.reserve = bytes;
  pthread_mutex_unlock(&p->mu);
}

int kio_pinned_grow(kio_pinned_pool *p) {
  if (!p) return 0;
  pthread_mutex_lock(&p->mu);
  int due = p->st.slab_bytes < p->reserve;
  pthread_mutex_unlock(&p->mu);
  if (!due) return 0;
  /* outside the lock: the others' blocks from the free lists meanwhile */
  double t0 = kio_now_s();
  char *b = p->be.alloc(p->slab);
  double dt = kio_now_s() - t0;
  pthread_mutex_lock(&p->mu);
  p->st.driver_allocs++;
  p->st.driver_alloc_s += dt;
  p->st.ahead_allocs++;
  int si = b ? new_slab_index(p) : -1;
  if (si >= 0) {
    p->slabs[si] = (slab_t){b, p->slab, 0, 0};
    p->st.slab_bytes += p->slab;
    p->st.slabs++;
  } else {
    p->reserve = p->st.reserve = p->st.slab_bytes;  /* no more tries */
  }
  pthread_mutex_unlock(&p->mu);
  if (si < 0 && b) backend_free(p, b);
  return si >= 0 ? 1 : -1;
}

void kio_pinned_get_stats(kio_pinned_pool *p, kio_pinned_stats *out) {
  memset(out, 0, sizeof *out);
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  *out = p->st;
  pthread_mutex_unlock(&p->mu);
}

void kio_pinned_pool_free(kio_pinned_pool *p) {
  if (!p) return;
  for (int i = 0; i < p->ncache; i++) p->be.free(p->cache[i]);
  for (int si = 0; si < p->nslabs; si++)
    if (p->slabs[si].base) p->be.free(p->slabs[si].base);
  free(p->slabs);
  pthread_mutex_destroy(&p->mu);
  free(p);
}
