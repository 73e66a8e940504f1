/* HmmTopology read/write (reference 3.1, Kaldi hmm/hmm-topology.cc).
 * Binary: integer vectors + counts, optional -1 marker for the
 * forward/self-loop pdf-class extension. Text: the human-readable
 * <TopologyEntry> form that is also lang/topo. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "model.h"

/* Upper bound for counts read from a file, so corrupt input cannot make us
 * allocate absurd amounts before a read fails. */
#define TOPO_MAX_COUNT (1 << 24)
/* States per entry and transitions per state (real topologies: < 10). Kept
 * small so a corrupt count costs no large allocation (fuzzing). */
#define TOPO_MAX_STATES (1 << 16)

void kio_topology_free(kio_topology *t) {
  if (!t) return;
  for (int32_t i = 0; i < t->num_entries; i++) {
    kio_topo_entry *e = &t->entries[i];
    for (int32_t j = 0; j < e->num_states; j++) free(e->states[j].trans);
    free(e->states);
  }
  free(t->entries);
  free(t->phones);
  free(t->phone2idx);
  memset(t, 0, sizeof *t);
}

/* Kaldi's IsHmm(): every state's forward and self-loop pdf-class agree. */
static int topo_is_hmm(const kio_topology *t) {
  for (int32_t i = 0; i < t->num_entries; i++)
    for (int32_t j = 0; j < t->entries[i].num_states; j++)
      if (t->entries[i].states[j].forward_pdf_class !=
          t->entries[i].states[j].self_loop_pdf_class)
        return 0;
  return 1;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* HmmTopology::Check(). Sets kio_set_error on failure. */
static int topo_check(const kio_topology *t) {
  if (t->num_entries <= 0 || t->num_phones <= 0 || t->num_phone2idx <= 0) {
    kio_set_error("HmmTopology::Check(), empty object.");
    return KIO_ERR;
  }
  int ret = KIO_ERR;
  char *seen = calloc((size_t)t->num_entries, 1);
  int32_t *classes = NULL;
  char *has_in = NULL;
  if (!seen) { kio_set_error("out of memory"); return KIO_ERR; }
  for (int32_t i = 0; i < t->num_phones; i++) {
    int32_t p = t->phones[i];
    if (p < 0 || p >= t->num_phone2idx || t->phone2idx[p] < 0 ||
        t->phone2idx[p] >= t->num_entries) {
      kio_set_error("HmmTopology::Check(), phone has no valid index.");
      goto done;
    }
    if (i > 0 && t->phones[i - 1] >= p) {
      kio_set_error("HmmTopology: phones not sorted and unique");
      goto done;
    }
    seen[t->phone2idx[p]] = 1;
  }
  for (int32_t i = 0; i < t->num_entries; i++) {
    const kio_topo_entry *e = &t->entries[i];
    int32_t ns = e->num_states;
    if (!seen[i]) {
      kio_set_error("HmmTopoloy::Check(), entry with no corresponding phones.");
      goto done;
    }
    if (ns <= 1) {
      kio_set_error("HmmTopology::Check(), cannot only have one state (i.e., must "
                    "have at least one emitting state).");
      goto done;
    }
    if (e->states[ns - 1].num_trans != 0) {
      kio_set_error("HmmTopology::Check(), last state must have no transitions.");
      goto done;
    }
    if (e->states[ns - 1].forward_pdf_class != -1 ||
        e->states[ns - 1].self_loop_pdf_class != -1) {
      kio_set_error("HmmTopology::Check(), last state must not be emitting.");
      goto done;
    }
    free(classes); free(has_in);
    classes = malloc(sizeof(int32_t) * 2 * (size_t)ns);
    has_in = calloc((size_t)ns, 1);
    if (!classes || !has_in) { kio_set_error("out of memory"); goto done; }
    int32_t nc = 0;
    for (int32_t j = 0; j < ns; j++) {
      const kio_topo_state *s = &e->states[j];
      float tot = 0.0f;
      if (s->forward_pdf_class != -1) {
        classes[nc++] = s->forward_pdf_class;
        classes[nc++] = s->self_loop_pdf_class;
      }
      for (int32_t k = 0; k < s->num_trans; k++) {
        int32_t dst = s->trans[k].dest;
        tot += s->trans[k].prob;
        if (!(s->trans[k].prob > 0.0f)) {
          kio_set_error("HmmTopology::Check(), negative or zero transition prob.");
          goto done;
        }
        if (dst == ns - 1 && s->forward_pdf_class == -1) {
          kio_set_error("We do not allow any state to be nonemitting and have a "
                        "transition to the final-state");
          goto done;
        }
        if (dst < 0 || dst >= ns) {
          kio_set_error("HmmTopology::Check(), invalid dest state %d", (int)dst);
          goto done;
        }
        for (int32_t m = 0; m < k; m++)
          if (s->trans[m].dest == dst) {
            kio_set_error("HmmTopology::Check(), duplicate transition found.");
            goto done;
          }
        if (dst == j && s->forward_pdf_class == -1) {
          kio_set_error("HmmTopology: nonemitting states cannot have self-loops.");
          goto done;
        }
        has_in[dst] = 1;
      }
      if (j + 1 < ns) {
        if (!(tot > 0.0f)) {
          kio_set_error("HmmTopology: non-final state must have transitions out");
          goto done;
        }
        if (fabs((double)tot - 1.0) > 0.01)
          KIO_WARN("Total probability for state %d in topology entry is %g",
                   (int)j, (double)tot);
      }
    }
    for (int32_t j = 1; j < ns; j++)
      if (!has_in[j]) {
        kio_set_error("HmmTopology::Check, state %d has no input transitions.", (int)j);
        goto done;
      }
    /* pdf-classes: sorted unique values must be exactly 0..n-1. */
    qsort(classes, (size_t)nc, sizeof(int32_t), cmp_i32);
    int32_t nu = 0;
    for (int32_t k = 0; k < nc; k++)
      if (nu == 0 || classes[nu - 1] != classes[k]) classes[nu++] = classes[k];
    if (nu == 0 || classes[0] != 0 || classes[nu - 1] != nu - 1) {
      kio_set_error("HmmTopology::Check(), pdf_classes are expected to be "
                    "contiguous and start from zero.");
      goto done;
    }
  }
  ret = KIO_OK;
done:
  free(seen); free(classes); free(has_in);
  return ret;
}

static int read_count(FILE *f, int binary, int32_t *n, const char *what) {
  if (kio_read_int32(f, binary, n) != KIO_OK) return KIO_ERR;
  if (*n < 0 || *n > TOPO_MAX_STATES) {
    kio_set_error("HmmTopology: bad %s count %d", what, (int)*n);
    return KIO_ERR;
  }
  return KIO_OK;
}

static int topo_read_binary(FILE *f, kio_topology *t) {
  int32_t n;
  if (kio_read_int_vector(f, 1, &t->phones, &t->num_phones) != KIO_OK) return KIO_ERR;
  if (kio_read_int_vector(f, 1, &t->phone2idx, &t->num_phone2idx) != KIO_OK) return KIO_ERR;
  if (kio_read_int32(f, 1, &n) != KIO_OK) return KIO_ERR;
  int is_hmm = 1;
  if (n == -1) { /* marker of the forward/self-loop extension */
    is_hmm = 0;
    if (kio_read_int32(f, 1, &n) != KIO_OK) return KIO_ERR;
  }
  /* Check() needs a phone per entry: more entries than phones is corrupt. */
  if (n < 0 || n > TOPO_MAX_COUNT || n > t->num_phones) {
    kio_set_error("HmmTopology: bad number of entries %d", (int)n);
    return KIO_ERR;
  }
  t->entries = calloc(n ? (size_t)n : 1, sizeof *t->entries);
  if (!t->entries) { kio_set_error("out of memory"); return KIO_ERR; }
  t->num_entries = n;
  for (int32_t i = 0; i < n; i++) {
    kio_topo_entry *e = &t->entries[i];
    int32_t ns;
    if (read_count(f, 1, &ns, "state") != KIO_OK) return KIO_ERR;
    e->states = calloc(ns ? (size_t)ns : 1, sizeof *e->states);
    if (!e->states) { kio_set_error("out of memory"); return KIO_ERR; }
    e->num_states = ns;
    for (int32_t j = 0; j < ns; j++) {
      kio_topo_state *s = &e->states[j];
      int32_t nt;
      if (kio_read_int32(f, 1, &s->forward_pdf_class) != KIO_OK) return KIO_ERR;
      if (is_hmm) s->self_loop_pdf_class = s->forward_pdf_class;
      else if (kio_read_int32(f, 1, &s->self_loop_pdf_class) != KIO_OK) return KIO_ERR;
      if (read_count(f, 1, &nt, "transition") != KIO_OK) return KIO_ERR;
      s->trans = calloc(nt ? (size_t)nt : 1, sizeof *s->trans);
      if (!s->trans) { kio_set_error("out of memory"); return KIO_ERR; }
      s->num_trans = nt;
      for (int32_t k = 0; k < nt; k++) {
        if (kio_read_int32(f, 1, &s->trans[k].dest) != KIO_OK ||
            kio_read_float(f, 1, &s->trans[k].prob) != KIO_OK)
          return KIO_ERR;
      }
    }
  }
  return kio_expect_token(f, 1, "</Topology>");
}

/* Growable arrays for the text parser. */
static int grow(void **p, int32_t *cap, int32_t need, size_t elem) {
  if (need <= *cap) return KIO_OK;
  int32_t nc = *cap ? *cap : 8;
  while (nc < need) nc *= 2;
  void *np = realloc(*p, (size_t)nc * elem);
  if (!np) { kio_set_error("out of memory"); return KIO_ERR; }
  memset((char *)np + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
  *p = np;
  *cap = nc;
  return KIO_OK;
}

static int parse_int(const char *s, int32_t *v) {
  char *end;
  long x = strtol(s, &end, 10);
  if (!*s || *end || x < INT32_MIN || x > INT32_MAX) return 0;
  *v = (int32_t)x;
  return 1;
}

/* One <TopologyEntry> (after its token). */
static int topo_read_text_entry(FILE *f, kio_topology *t, int32_t *cap_e,
                                int32_t *cap_p) {
  char tok[64];
  int32_t *phones = NULL, nph = 0, cap_ph = 0;
  int ret = KIO_ERR;
  if (kio_expect_token(f, 0, "<ForPhones>") != KIO_OK) return KIO_ERR;
  for (;;) {
    if (kio_read_token(f, 0, tok, sizeof tok) != KIO_OK) {
      kio_set_error("Reading HmmTopology object, unexpected end of file while "
                    "expecting phones.");
      goto done;
    }
    if (!strcmp(tok, "</ForPhones>")) break;
    int32_t p;
    if (!parse_int(tok, &p)) {
      kio_set_error("Reading HmmTopology object, expected integer, got instead %s", tok);
      goto done;
    }
    if (grow((void **)&phones, &cap_ph, nph + 1, sizeof *phones) != KIO_OK) goto done;
    phones[nph++] = p;
  }
  if (grow((void **)&t->entries, cap_e, t->num_entries + 1, sizeof *t->entries) != KIO_OK)
    goto done;
  int32_t my_index = t->num_entries++;
  kio_topo_entry *e = &t->entries[my_index];
  int32_t cap_s = 0;
  if (kio_read_token(f, 0, tok, sizeof tok) != KIO_OK) goto done;
  while (strcmp(tok, "</TopologyEntry>") != 0) {
    int32_t st;
    if (strcmp(tok, "<State>") != 0) {
      kio_set_error("Expected </TopologyEntry> or <State>, got instead %s", tok);
      goto done;
    }
    if (kio_read_int32(f, 0, &st) != KIO_OK) goto done;
    if (st != e->num_states) {
      kio_set_error("States are expected to be in order from zero, expected %d, got %d",
                    (int)e->num_states, (int)st);
      goto done;
    }
    if (grow((void **)&e->states, &cap_s, e->num_states + 1, sizeof *e->states) != KIO_OK)
      goto done;
    kio_topo_state *s = &e->states[e->num_states++];
    s->forward_pdf_class = s->self_loop_pdf_class = -1;
    if (kio_read_token(f, 0, tok, sizeof tok) != KIO_OK) goto done;
    if (!strcmp(tok, "<PdfClass>")) {
      if (kio_read_int32(f, 0, &s->forward_pdf_class) != KIO_OK) goto done;
      s->self_loop_pdf_class = s->forward_pdf_class;
      if (kio_read_token(f, 0, tok, sizeof tok) != KIO_OK) goto done;
      if (!strcmp(tok, "<SelfLoopPdfClass>")) {
        kio_set_error("pdf classes should be defined using <PdfClass> or "
                      "<ForwardPdfClass>/<SelfLoopPdfClass> pair");
        goto done;
      }
    } else if (!strcmp(tok, "<ForwardPdfClass>")) {
      if (kio_read_int32(f, 0, &s->forward_pdf_class) != KIO_OK) goto done;
      if (kio_read_token(f, 0, tok, sizeof tok) != KIO_OK) goto done;
      if (strcmp(tok, "<SelfLoopPdfClass>") != 0) {
        kio_set_error("Expected <SelfLoopPdfClass>, got instead %s", tok);
        goto done;
      }
      if (kio_read_int32(f, 0, &s->self_loop_pdf_class) != KIO_OK) goto done;
      if (kio_read_token(f, 0, tok, sizeof tok) != KIO_OK) goto done;
    }
    int32_t cap_t = 0;
    while (!strcmp(tok, "<Transition>")) {
      if (grow((void **)&s->trans, &cap_t, s->num_trans + 1, sizeof *s->trans) != KIO_OK)
        goto done;
      kio_topo_trans *tr = &s->trans[s->num_trans++];
      if (kio_read_int32(f, 0, &tr->dest) != KIO_OK ||
          kio_read_float(f, 0, &tr->prob) != KIO_OK ||
          kio_read_token(f, 0, tok, sizeof tok) != KIO_OK)
        goto done;
    }
    if (!strcmp(tok, "<Final>")) {
      kio_set_error("You are trying to read old-format topology with new Kaldi.");
      goto done;
    }
    if (strcmp(tok, "</State>") != 0) {
      kio_set_error("Reading HmmTopology,  unexpected token %s", tok);
      goto done;
    }
    if (kio_read_token(f, 0, tok, sizeof tok) != KIO_OK) goto done;
  }
  for (int32_t i = 0; i < nph; i++) {
    int32_t p = phones[i];
    if (p <= 0 || p > TOPO_MAX_COUNT) {
      kio_set_error("HmmTopology: invalid phone %d", (int)p);
      goto done;
    }
    if (p >= t->num_phone2idx) {
      int32_t old = t->num_phone2idx;
      int32_t cap = old;
      if (grow((void **)&t->phone2idx, &cap, p + 1, sizeof(int32_t)) != KIO_OK) goto done;
      for (int32_t k = old; k <= p; k++) t->phone2idx[k] = -1;
      t->num_phone2idx = p + 1;
    }
    if (t->phone2idx[p] != -1) {
      kio_set_error("Phone with index %d appears in multiple topology entries.", (int)i);
      goto done;
    }
    t->phone2idx[p] = my_index;
    if (grow((void **)&t->phones, cap_p, t->num_phones + 1, sizeof(int32_t)) != KIO_OK)
      goto done;
    t->phones[t->num_phones++] = p;
  }
  ret = KIO_OK;
done:
  free(phones);
  return ret;
}

int kio_topology_read(FILE *f, int binary, kio_topology *t) {
  kio_topology_free(t);
  int ret = KIO_ERR;
  if (kio_expect_token(f, binary, "<Topology>") != KIO_OK) goto done;
  if (binary) {
    if (topo_read_binary(f, t) != KIO_OK) goto done;
  } else {
    char tok[64];
    int32_t cap_e = 0, cap_p = 0;
    for (;;) {
      if (kio_read_token(f, 0, tok, sizeof tok) != KIO_OK) goto done;
      if (!strcmp(tok, "</Topology>")) break;
      if (strcmp(tok, "<TopologyEntry>") != 0) {
        kio_set_error("Reading HmmTopology object, expected </Topology> or "
                      "<TopologyEntry>, got %s", tok);
        goto done;
      }
      if (topo_read_text_entry(f, t, &cap_e, &cap_p) != KIO_OK) goto done;
    }
    if (t->num_phones > 0)
      qsort(t->phones, (size_t)t->num_phones, sizeof(int32_t), cmp_i32);
  }
  ret = topo_check(t);
done:
  if (ret != KIO_OK) kio_topology_free(t);
  return ret;
}

int kio_topology_write(FILE *f, int binary, const kio_topology *t) {
  kio_write_token(f, binary, "<Topology>");
  if (!binary) {
    fputc('\n', f);
    for (int32_t i = 0; i < t->num_entries; i++) {
      const kio_topo_entry *e = &t->entries[i];
      kio_write_token(f, 0, "<TopologyEntry>");
      fputc('\n', f);
      kio_write_token(f, 0, "<ForPhones>");
      fputc('\n', f);
      for (int32_t j = 0; j < t->num_phone2idx; j++)
        if (t->phone2idx[j] == i) fprintf(f, "%d ", (int)j);
      fputc('\n', f);
      kio_write_token(f, 0, "</ForPhones>");
      fputc('\n', f);
      for (int32_t j = 0; j < e->num_states; j++) {
        const kio_topo_state *s = &e->states[j];
        kio_write_token(f, 0, "<State>");
        kio_write_int32(f, 0, j);
        if (s->forward_pdf_class != -1) {
          if (s->forward_pdf_class == s->self_loop_pdf_class) {
            kio_write_token(f, 0, "<PdfClass>");
            kio_write_int32(f, 0, s->forward_pdf_class);
          } else {
            kio_write_token(f, 0, "<ForwardPdfClass>");
            kio_write_int32(f, 0, s->forward_pdf_class);
            kio_write_token(f, 0, "<SelfLoopPdfClass>");
            kio_write_int32(f, 0, s->self_loop_pdf_class);
          }
        }
        for (int32_t k = 0; k < s->num_trans; k++) {
          kio_write_token(f, 0, "<Transition>");
          kio_write_int32(f, 0, s->trans[k].dest);
          kio_write_float(f, 0, s->trans[k].prob);
        }
        kio_write_token(f, 0, "</State>");
        fputc('\n', f);
      }
      kio_write_token(f, 0, "</TopologyEntry>");
      fputc('\n', f);
    }
  } else {
    int is_hmm = topo_is_hmm(t);
    kio_write_int_vector(f, 1, t->phones, t->num_phones);
    kio_write_int_vector(f, 1, t->phone2idx, t->num_phone2idx);
    if (!is_hmm) kio_write_int32(f, 1, -1);
    kio_write_int32(f, 1, t->num_entries);
    for (int32_t i = 0; i < t->num_entries; i++) {
      const kio_topo_entry *e = &t->entries[i];
      kio_write_int32(f, 1, e->num_states);
      for (int32_t j = 0; j < e->num_states; j++) {
        const kio_topo_state *s = &e->states[j];
        kio_write_int32(f, 1, s->forward_pdf_class);
        if (!is_hmm) kio_write_int32(f, 1, s->self_loop_pdf_class);
        kio_write_int32(f, 1, s->num_trans);
        for (int32_t k = 0; k < s->num_trans; k++) {
          kio_write_int32(f, 1, s->trans[k].dest);
          kio_write_float(f, 1, s->trans[k].prob);
        }
      }
    }
  }
  kio_write_token(f, binary, "</Topology>");
  if (!binary) fputc('\n', f);
  return ferror(f) ? KIO_ERR : KIO_OK;
}
