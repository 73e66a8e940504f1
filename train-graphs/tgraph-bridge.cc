// train-graphs' C++ bridge: Kaldi's TrainingGraphCompiler on OpenFst types,
// behind the C interface of train-graphs.h. Only extern "C" functions are
// exported and no exception escapes.
//
// Per utterance (Kaldi's CompileGraph / CompileGraphFromLG): a linear word
// acceptor, table composition with the lexicon, composition with the
// inverse context FST (a new one per utterance, so label numbering is the
// utterance's own), an H transducer for exactly those labels, table
// composition, determinize-star in the log semiring, disambiguation symbols
// to epsilon, encoded minimisation, self-loops. Utterances share only the
// read-only lexicon, so they are compiled on several threads.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <fst/fstlib.h>

#include "base/sys/cpu-share.h"
#include "base/model/fst-bridge.h"
#include "base/io/io.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "tgraph-det.h"
#include "tgraph-fst.h"
#include "train-graphs.h"

namespace {

using tgraph::Arc;
using tgraph::Label;
using tgraph::StateId;
using tgraph::VFst;
using tgraph::Weight;

// A graph that failed: the Kaldi message it prints (kaldi-msg.h) and its
// text, printed by the caller's thread.
struct Failure {
  kio_kaldi_id id = KIO_KM_TGC_FAILED;
  std::string msg;
};

struct AssertFail {
  kio_kaldi_id id;  // KIO_KM_TGC_ASSERT_*: a format without arguments
};

class DropInputSymbols {
 public:
  explicit DropInputSymbols(const std::vector<int32_t> &v) : set_(v.begin(), v.end()) {}
  Arc operator()(const Arc &a) const {
    Arc b = a;
    if (set_.count(b.ilabel)) b.ilabel = 0;
    return b;
  }
  fst::MapFinalAction FinalAction() const { return fst::MAP_NO_SUPERFINAL; }
  fst::MapSymbolsAction InputSymbolsAction() const { return fst::MAP_CLEAR_SYMBOLS; }
  fst::MapSymbolsAction OutputSymbolsAction() const { return fst::MAP_COPY_SYMBOLS; }
  uint64 Properties(uint64 props) const {
    uint64 unknown = fst::kAcceptor | fst::kNotAcceptor | fst::kIDeterministic |
                     fst::kNonIDeterministic | fst::kNoEpsilons | fst::kNoIEpsilons |
                     fst::kILabelSorted | fst::kNotILabelSorted;
    return props & ~unknown;
  }

 private:
  std::set<int32_t> set_;
};

// Kaldi's DeterminizeStarInLog: sorts on input labels, determinizes in the
// log semiring (Kaldi reinterprets the FST as one of log arcs, sharing it;
// here the weights' float values are read as log weights), and the result
// replaces *f (built by the same calls, so with the same property bits).
void DeterminizeStarInLog(VFst *f, int max_states) {
  fst::ArcSort(f, fst::ILabelCompare<Arc>());
  VFst det;
  det.SetOutputSymbols(f->OutputSymbols());
  det.SetInputSymbols(f->InputSymbols());
  {
    tgraph::DetStar<Arc, fst::LogWeight> d(*f, fst::kDelta, max_states);
    d.Run();
    d.Output(&det);
  }
  *f = det;
}

void MinimizeEncoded(VFst *f) {
  fst::ArcMap(f, fst::QuantizeMapper<Arc>(fst::kDelta));
  tgraph::Encoder<Arc> enc(fst::ENCODE);
  tgraph::Encode(f, &enc);
  tgraph::AcceptorMinimize(f);
  tgraph::Decode(f, enc);
}

}  // namespace

struct tgraph_compiler {
  const kio_tmodel *tm;
  const kio_ctx_dep *tree;
  tgraph_opts opts;
  VFst lex;
  std::vector<int32_t> phones, disambig;
  std::unique_ptr<tgraph::SymbolKinds> syms;
  Label subseq;

  // One utterance; throws AssertFail / tgraph::Error / tgraph::DetError.
  // One cache per worker thread, kept for the compiler's life.
  std::vector<std::unique_ptr<tgraph::HmmCache> > caches;
  // Caches lent to tgraph_compile_one's callers (any threads).
  std::mutex pool_mu;
  std::vector<std::unique_ptr<tgraph::HmmCache> > pool;

  void Compile(const int32_t *w, int32_t n, tgraph::HmmCache *hc, VFst *out) const {
    VFst word;
    tgraph::LinearAcceptor(w, n, &word);
    VFst p2w;
    tgraph::TableCompose(lex, word, &p2w);
    if (p2w.Start() == fst::kNoStateId)
      throw AssertFail{KIO_KM_TGC_ASSERT_P2W};
    tgraph::LabelTable labels;
    tgraph::InvContext inv(subseq, *syms, tree->context_width,
                           tree->central_position, &labels);
    VFst clg;
    tgraph::ComposeContext(p2w, &inv, &clg);
    if (clg.Start() == fst::kNoStateId)
      throw AssertFail{KIO_KM_TGC_ASSERT_CTX};
    std::vector<int32_t> dh;
    std::unique_ptr<VFst> H(tgraph::MakeH(labels.info, *tree, *tm, opts.transition_scale, hc, &dh));
    VFst &t = *out;
    tgraph::TableCompose(*H, clg, &t);
    if (t.Start() == fst::kNoStateId)
      throw AssertFail{KIO_KM_TGC_ASSERT_TRANS};
    DeterminizeStarInLog(&t, opts.max_states);
    if (!dh.empty()) fst::ArcMap(&t, DropInputSymbols(dh));
    MinimizeEncoded(&t);
    tgraph::AddSelfLoops(*tm, opts.self_loop_scale, opts.reorder != 0, &t);
  }
};

namespace {

bool ToCsr(const VFst &f, kio_fst *g) {
  int64_t ns = f.NumStates(), na = 0;
  for (StateId s = 0; s < ns; s++) na += f.NumArcs(s);
  if (kio_fst_reserve(g, ns, na) != KIO_OK) return false;
  g->start = f.Start() == fst::kNoStateId ? -1 : f.Start();
  int64_t k = 0;
  for (StateId s = 0; s < ns; s++) {
    g->arc_start[s] = static_cast<int32_t>(k);
    for (fst::ArcIterator<VFst> it(f, s); !it.Done(); it.Next(), k++) {
      const Arc &a = it.Value();
      g->arcs[k].ilabel = a.ilabel;
      g->arcs[k].olabel = a.olabel;
      g->arcs[k].weight = a.weight.Value();
      g->arcs[k].nextstate = a.nextstate;
    }
    g->final[s] = f.Final(s).Value();
  }
  g->arc_start[ns] = static_cast<int32_t>(k);
  return true;
}

// VectorFst::Write's bytes (OpenFst's WriteFst, file version 2) without a
// stream per field: the header comes from OpenFst itself, the body (per
// state: final weight, int64 arc count, arcs as ilabel, olabel, weight,
// nextstate) is copied into one buffer of the exact size.
void WriteBytes(const VFst &f, tgraph_graph *out) {
  const StateId ns = f.NumStates();
  size_t na = 0;
  for (StateId s = 0; s < ns; s++) na += f.NumArcs(s);
  std::ostringstream hs;
  fst::FstHeader hdr;
  hdr.SetStart(f.Start());
  hdr.SetNumStates(ns);
  fst::FstWriteOptions wopts;
  fst::internal::FstImpl<Arc>::WriteFstHeader(
      f, hs, wopts, 2, "vector",
      f.Properties(fst::kCopyProperties, false) | fst::kExpanded | fst::kMutable, &hdr);
  if (!hs) throw tgraph::Error("Error writing FST");
  const std::string h = hs.str();
  static_assert(sizeof(Arc) == 16 && sizeof(Weight) == 4, "packed StdArc expected");
  const size_t len = h.size() + ns * (sizeof(float) + sizeof(int64_t)) + na * 16;
  char *b = static_cast<char *>(malloc(len ? len : 1));
  if (!b) throw std::bad_alloc();
  char *p = b;
  memcpy(p, h.data(), h.size());
  p += h.size();
  for (StateId s = 0; s < ns; s++) {
    const float fw = f.Final(s).Value();
    memcpy(p, &fw, 4);
    const int64_t n = f.NumArcs(s);
    memcpy(p + 4, &n, 8);
    p += 12;
    for (fst::ArcIterator<VFst> it(f, s); !it.Done(); it.Next(), p += 16) {
      const Arc &a = it.Value();
      const float w = a.weight.Value();
      memcpy(p, &a.ilabel, 4);
      memcpy(p + 4, &a.olabel, 4);
      memcpy(p + 8, &w, 4);
      memcpy(p + 12, &a.nextstate, 4);
    }
  }
  out->bytes = b;
  out->len = len;
}

// Compiles utterance i into out[i]; on failure records it in *fail.
bool CompileInto(const tgraph_compiler *c, const kio_int_vec &w, int what,
                 tgraph::HmmCache *hc, tgraph_graph *out, Failure *fail) {
  try {
    VFst g;
    c->Compile(w.v, w.n, hc, &g);
    out->empty = g.Start() == fst::kNoStateId;
    if (what & TGRAPH_BYTES) WriteBytes(g, out);
    if ((what & TGRAPH_CSR) && !ToCsr(g, &out->fst)) throw std::bad_alloc();
    return true;
  } catch (const AssertFail &a) {
    fail->id = a.id;
    fail->msg = kio_kaldi_msgs[a.id].fmt;
  } catch (const tgraph::DetError &e) {
    fail->id = KIO_KM_DETSTAR_FAILED;
    fail->msg = e.what();
  } catch (const std::bad_alloc &) {
    fail->msg = "out of memory compiling a training graph";
  } catch (const std::exception &e) {
    fail->msg = e.what();
  }
  return false;
}

}  // namespace

extern "C" {

void tgraph_opts_default(tgraph_opts *o) {
  o->transition_scale = 1.0f;
  o->self_loop_scale = 1.0f;
  o->reorder = 1;
  o->rm_eps = 0;
  o->max_states = 0;
}

int tgraph_create(tgraph_compiler **out, const kio_tmodel *tm, const kio_ctx_dep *tree,
                  const char *lex_rx, const int32_t *disambig, int32_t num_disambig,
                  const tgraph_opts *opts) {
  *out = nullptr;
  if (opts->rm_eps) {
    KIO_ERROR("--rm-eps=true is not supported");
    return KIO_ERR;
  }
  kio_fst lex = {};
  {
    kio_input *in = nullptr;
    int binary;
    if (kio_input_open(&in, lex_rx[0] ? lex_rx : "-", &binary) != KIO_OK) return KIO_ERR;
    int st = kio_fst_read(kio_input_stream(in), &lex);
    int cst = kio_input_close(in);
    if (st != KIO_OK || cst != KIO_OK) {
      KIO_KALDI(FST_READ_HEADER, lex_rx);
      kio_fst_free(&lex);
      return KIO_ERR;
    }
  }
  tgraph_compiler *c = new (std::nothrow) tgraph_compiler;
  if (!c) {
    kio_fst_free(&lex);
    return KIO_ERR;
  }
  c->tm = tm;
  c->tree = tree;
  c->opts = *opts;
  for (int32_t s = 0; s < lex.num_states; s++) c->lex.AddState();
  if (lex.start >= 0) c->lex.SetStart(lex.start);
  for (int32_t s = 0; s < lex.num_states; s++) {
    if (lex.final[s] != INFINITY) c->lex.SetFinal(s, Weight(lex.final[s]));
    for (int32_t k = lex.arc_start[s]; k < lex.arc_start[s + 1]; k++) {
      const kio_arc &a = lex.arcs[k];
      c->lex.AddArc(s, Arc(a.ilabel, a.olabel, Weight(a.weight), a.nextstate));
    }
  }
  kio_fst_free(&lex);

  c->phones.assign(tm->topo.phones, tm->topo.phones + tm->topo.num_phones);
  if (c->phones.empty()) {
    KIO_ERROR("the model has no phones");
    delete c;
    return KIO_ERR;
  }
  c->disambig.assign(disambig, disambig + num_disambig);
  std::sort(c->disambig.begin(), c->disambig.end());
  c->disambig.erase(std::unique(c->disambig.begin(), c->disambig.end()), c->disambig.end());
  for (int32_t d : c->disambig) {
    if (std::binary_search(c->phones.begin(), c->phones.end(), d)) {
      KIO_KALDI(TGC_DISAMBIG_PHONE, d);
      delete c;
      return KIO_ERR;
    }
  }
  try {
    c->syms.reset(new tgraph::SymbolKinds(c->phones, c->disambig));
  } catch (...) {
    KIO_ERROR("out of memory");
    delete c;
    return KIO_ERR;
  }
  c->subseq = 1 + c->phones.back();
  if (!c->disambig.empty() && c->subseq <= c->disambig.back()) c->subseq = 1 + c->disambig.back();
  if (tree->central_position != tree->context_width - 1)
    tgraph::SubsequentialLoop(c->subseq, &c->lex);
  fst::ArcSort(&c->lex, fst::OLabelCompare<Arc>());
  *out = c;
  return KIO_OK;
}

void tgraph_free(tgraph_compiler *c) { delete c; }

void tgraph_graph_free(tgraph_graph *g) {
  free(g->bytes);
  kio_fst_free(&g->fst);
  memset(g, 0, sizeof *g);
}

int tgraph_compile(tgraph_compiler *c, int n, const kio_int_vec *words, int what,
                   int num_threads, tgraph_graph *out) {
  if (n <= 0) return KIO_OK;
  if (num_threads <= 0) num_threads = kio_cpu_share(0);
  if (num_threads > n) num_threads = n;
  std::vector<Failure> fails(n);
  std::vector<char> ok(n, 1);
  std::atomic<int> next(0);
  try {
    while (static_cast<int>(c->caches.size()) < num_threads)
      c->caches.emplace_back(new tgraph::HmmCache);
  } catch (...) {
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  auto work = [&](int t) {
    for (int i; (i = next.fetch_add(1)) < n;)
      ok[i] = CompileInto(c, words[i], what, c->caches[t].get(), &out[i], &fails[i]);
  };
  if (num_threads == 1) {
    work(0);
  } else {
    std::vector<std::thread> th;
    try {
      for (int t = 1; t < num_threads; t++) th.emplace_back(work, t);
    } catch (...) {
    }
    work(0);
    for (auto &t : th) t.join();
  }
  for (int i = 0; i < n; i++) {
    if (!ok[i]) {
      kio_kaldi_print(fails[i].id, fails[i].msg.c_str());
      return KIO_ERR;
    }
  }
  return KIO_OK;
}

int tgraph_compile_one(tgraph_compiler *c, const kio_int_vec *words, int what,
                       tgraph_graph *out) {
  std::unique_ptr<tgraph::HmmCache> hc;
  {
    std::lock_guard<std::mutex> lock(c->pool_mu);
    if (!c->pool.empty()) {
      hc = std::move(c->pool.back());
      c->pool.pop_back();
    }
  }
  if (!hc) hc.reset(new (std::nothrow) tgraph::HmmCache);
  if (!hc) {
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  Failure f;
  bool ok = CompileInto(c, *words, what, hc.get(), out, &f);
  {
    std::lock_guard<std::mutex> lock(c->pool_mu);
    try {
      c->pool.push_back(std::move(hc));
    } catch (...) {
    }
  }
  if (!ok) {
    kio_kaldi_print(f.id, f.msg.c_str());
    return KIO_ERR;
  }
  return KIO_OK;
}

}  // extern "C"

namespace {

int HolderRead(FILE *, int, void *) {
  kio_set_error("tgraph_graph_holder is write-only");
  return KIO_ERR;
}

int HolderWrite(FILE *f, int binary, const void *obj) {
  const tgraph_graph *g = static_cast<const tgraph_graph *>(obj);
  if (!binary) {  // Kaldi's text form, from the CSR copy
    if (!g->fst.arc_start && !g->empty) {
      kio_set_error("text-mode FST output needs the CSR form of the graph");
      return KIO_ERR;
    }
    return kio_fst_holder.write(f, 0, &g->fst);
  }
  return fwrite(g->bytes, 1, g->len, f) == g->len ? KIO_OK : KIO_ERR;
}

void HolderFree(void *obj) { tgraph_graph_free(static_cast<tgraph_graph *>(obj)); }

}  // namespace

extern "C" const kio_holder tgraph_graph_holder = {
  "VectorFst<StdArc>", sizeof(tgraph_graph), 0, HolderRead, HolderWrite, HolderFree, nullptr
};
