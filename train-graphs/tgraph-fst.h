// The pieces of Kaldi's training-graph construction that OpenFst does not
// have, written against OpenFst's types (C++ bridge only, internal to
// train-graphs/): the compose matcher for the left FST, the inverse context
// FST and its on-demand composition, the H transducer, self-loops. Each one
// makes the same OpenFst calls in the same order as Kaldi, so that state
// numbers, arc order and the FST property bits written to the archive match.
#ifndef TGRAPH_FST_H
#define TGRAPH_FST_H

#include <cmath>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fst/fstlib.h>

#include "base/model/model.h"
#include "tgraph-ops.h"

namespace tgraph {

typedef fst::StdArc Arc;
typedef Arc::Weight Weight;
typedef Arc::Label Label;
typedef Arc::StateId StateId;
typedef fst::VectorFst<Arc> VFst;

struct Error : std::runtime_error {
  explicit Error(const std::string &m) : std::runtime_error(m) {}
};

struct VecHash {
  size_t operator()(const std::vector<int32_t> &v) const {
    size_t h = 0;
    for (int32_t x : v) h = h * 7853 + static_cast<size_t>(x);
    return h;
  }
};

// Left matcher of the table composition: the left FST is sorted on output
// labels; matches are found in arc order. Reports MATCH_OUTPUT without
// testing properties (the composition then compares both sides' arc counts
// per state, as it does for Kaldi's table matcher).
class LeftMatcher : public fst::MatcherBase<Arc> {
 public:
  typedef fst::Fst<Arc> FST;
  explicit LeftMatcher(const FST &f, fst::MatchType = fst::MATCH_OUTPUT)
      : m_(f, fst::MATCH_OUTPUT) {}
  LeftMatcher(const LeftMatcher &o, bool safe) : m_(o.m_, safe) {}
  LeftMatcher *Copy(bool safe = false) const override { return new LeftMatcher(*this, safe); }
  fst::MatchType Type(bool) const override { return fst::MATCH_OUTPUT; }
  void SetState(StateId s) final { m_.SetState(s); }
  bool Find(Label l) final { return m_.Find(l); }
  bool Done() const final { return m_.Done(); }
  const Arc &Value() const final { return m_.Value(); }
  void Next() final { m_.Next(); }
  const FST &GetFst() const override { return m_.GetFst(); }
  uint64 Properties(uint64 props) const override { return props; }

 private:
  fst::SortedMatcher<FST> m_;
};

// ifst1 o ifst2 with LeftMatcher on ifst1 (sorted on output labels), then
// Connect, as Kaldi's TableCompose.
inline void TableCompose(const fst::Fst<Arc> &f1, const fst::Fst<Arc> &f2, VFst *out) {
  fst::CacheOptions copts;
  copts.gc_limit = 0;
  fst::ComposeFstImplOptions<LeftMatcher, fst::SortedMatcher<fst::Fst<Arc> > > o(copts);
  o.matcher1 = new LeftMatcher(f1);
  *out = fst::ComposeFst<Arc>(f1, f2, o);
  tgraph::Connect(out);
}

inline void LinearAcceptor(const int32_t *w, int32_t n, VFst *f) {
  f->DeleteStates();
  StateId cur = f->AddState();
  f->SetStart(cur);
  for (int32_t i = 0; i < n; i++) {
    StateId next = f->AddState();
    f->AddArc(cur, Arc(w[i], w[i], Weight::One(), next));
    cur = next;
  }
  f->SetFinal(cur, Weight::One());
}

inline void SubsequentialLoop(Label sym, VFst *f) {
  std::vector<StateId> finals;
  for (fst::StateIterator<VFst> it(*f); !it.Done(); it.Next())
    if (f->Final(it.Value()) != Weight::Zero()) finals.push_back(it.Value());
  StateId super = f->AddState();
  f->AddArc(super, Arc(sym, 0, Weight::One(), super));
  f->SetFinal(super, Weight::One());
  for (StateId s : finals) f->AddArc(s, Arc(sym, 0, f->Final(s), super));
}

// Phone-in-context labels: vector -> id in order of first use; id 0 is the
// empty vector (epsilon), id 1 the pseudo-epsilon [0] when it exists.
struct LabelTable {
  std::vector<std::vector<int32_t> > info;
  std::unordered_map<std::vector<int32_t>, Label, VecHash> map;
  Label Find(const std::vector<int32_t> &v) {
    auto it = map.find(v);
    if (it != map.end()) return it->second;
    Label l = static_cast<Label>(info.size());
    info.push_back(v);
    map[v] = l;
    return l;
  }
};

// Phone and disambiguation-symbol lookup by label, built once per compiler
// (the context FST asks for every arc of every utterance).
struct SymbolKinds {
  enum { kOther = 0, kPhone = 1, kDisambig = 2 };
  std::vector<char> kind;
  bool empty_disambig = true;
  SymbolKinds(const std::vector<int32_t> &phones, const std::vector<int32_t> &disambig) {
    for (int32_t p : phones) Set(p, kPhone);
    for (int32_t d : disambig) Set(d, kDisambig);
    empty_disambig = disambig.empty();
  }
  int Of(Label l) const {
    return l >= 0 && static_cast<size_t>(l) < kind.size() ? kind[l] : static_cast<int>(kOther);
  }

 private:
  void Set(int32_t l, char k) {
    if (l < 0) return;
    if (kind.size() <= static_cast<size_t>(l)) kind.resize(l + 1, kOther);
    kind[l] = k;
  }
};

// The inverse of the context FST, expanded on demand (Kaldi's
// InverseContextFst): states are the last N-1 phones seen.
class InvContext {
 public:
  InvContext(Label subseq, const SymbolKinds &syms, int N, int P, LabelTable *labels)
      : N_(N), P_(P), subseq_(subseq), syms_(syms), labels_(labels) {
    labels_->Find(std::vector<int32_t>());
    State(std::vector<int32_t>(N_ - 1, 0));
    if (N_ > P_ + 1 && !syms_.empty_disambig) {
      pseudo_eps_ = labels_->Find(std::vector<int32_t>(1, 0));
    } else {
      pseudo_eps_ = 0;
    }
  }
  StateId Start() const { return 0; }
  Weight Final(StateId s) const {
    const std::vector<int32_t> &ctx = seqs_[s];
    bool f = P_ < N_ - 1 ? ctx[P_] == subseq_ : true;
    return f ? Weight::One() : Weight::Zero();
  }
  // The arc of the (non-inverted) context FST with input ilabel: *olabel is
  // the phone-in-context label.
  bool GetArc(StateId s, Label ilabel, Label *olabel, StateId *next) {
    const int kind = syms_.Of(ilabel);
    if (kind == SymbolKinds::kDisambig) {
      *olabel = labels_->Find(std::vector<int32_t>(1, -ilabel));
      *next = s;
      return true;
    }
    bool phone = kind == SymbolKinds::kPhone;
    if (!phone && ilabel != subseq_) {
      throw Error("ContextFst: CreateArc, invalid ilabel supplied [confusion about phone list "
                  "or disambig symbols?]: " + std::to_string(ilabel));
    }
    std::vector<int32_t> seq = seqs_[s];
    if (phone) {
      if (!seq.empty() && seq.back() == subseq_) return false;
    } else {
      if (P_ + 1 == N_ || seq[P_] == subseq_) return false;
    }
    std::vector<int32_t> full(seq);
    full.push_back(ilabel);
    for (int i = P_ + 1; i < N_; i++)
      if (full[i] == subseq_) full[i] = 0;
    if (!seq.empty()) {
      seq.erase(seq.begin());
      seq.push_back(ilabel);
    }
    *next = State(seq);
    *olabel = full[P_] == 0 ? pseudo_eps_ : labels_->Find(full);
    return true;
  }

 private:
  StateId State(const std::vector<int32_t> &seq) {
    auto it = states_.find(seq);
    if (it != states_.end()) return it->second;
    StateId id = static_cast<StateId>(seqs_.size());
    seqs_.push_back(seq);
    states_[seq] = id;
    return id;
  }
  int N_, P_;
  Label subseq_, pseudo_eps_;
  const SymbolKinds &syms_;
  LabelTable *labels_;
  std::vector<std::vector<int32_t> > seqs_;
  std::unordered_map<std::vector<int32_t>, StateId, VecHash> states_;
};

// C o LG (Kaldi's ComposeDeterministicOnDemandInverse with the inverse
// context FST on the left): breadth-first over state pairs.
inline void ComposeContext(const VFst &right, InvContext *left, VFst *out) {
  typedef std::pair<StateId, StateId> Pair;
  struct PairHash {
    size_t operator()(const Pair &p) const {
      return static_cast<size_t>(p.first) * 7853u + static_cast<size_t>(p.second);
    }
  };
  std::unordered_map<Pair, StateId, PairHash> ids;
  std::queue<std::pair<Pair, StateId> > q;  // with the output state's id
  out->DeleteStates();
  if (right.Start() == fst::kNoStateId) return;
  Pair start(left->Start(), right.Start());
  StateId s0 = out->AddState();
  q.push(std::make_pair(start, s0));
  out->SetStart(s0);
  ids[start] = s0;
  while (!q.empty()) {
    Pair p = q.front().first;
    StateId cur = q.front().second;
    q.pop();
    Weight fw = Times(left->Final(p.first), right.Final(p.second));
    if (fw != Weight::Zero()) out->SetFinal(cur, fw);
    for (fst::ArcIterator<VFst> it(right, p.second); !it.Done(); it.Next()) {
      const Arc &a = it.Value();
      Label il = 0;
      StateId nl = p.first;
      if (a.ilabel != 0 && !left->GetArc(p.first, a.ilabel, &il, &nl)) continue;
      Pair np(nl, a.nextstate);
      auto f = ids.find(np);
      StateId next;
      if (f == ids.end()) {
        next = out->AddState();
        ids[np] = next;
        q.push(std::make_pair(np, next));
      } else {
        next = f->second;
      }
      if (a.ilabel == 0)
        out->AddArc(cur, Arc(0, a.olabel, a.weight, next));
      else
        out->AddArc(cur, Arc(il, a.olabel, Times(Weight::One(), a.weight), next));
    }
  }
}

// ---- transition model helpers (Kaldi's TransitionModel queries) ----
inline int32_t NumPdfClasses(const kio_topo_entry &e) {
  int32_t m = -1;
  for (int32_t i = 0; i < e.num_states; i++) {
    m = std::max(m, e.states[i].forward_pdf_class);
    m = std::max(m, e.states[i].self_loop_pdf_class);
  }
  return m + 1;
}
inline const kio_topo_entry &TopoEntry(const kio_tmodel &tm, int32_t phone) {
  const kio_topology &t = tm.topo;
  if (phone < 0 || phone >= t.num_phone2idx || t.phone2idx[phone] < 0)
    throw Error("TopologyForPhone(), phone " + std::to_string(phone) + " not covered.");
  return t.entries[t.phone2idx[phone]];
}
inline int32_t TupleToTs(const kio_tmodel &tm, int32_t phone, int32_t hmm_state, int32_t fpdf,
                         int32_t spdf) {
  int32_t lo = 0, hi = tm.num_tuples;
  while (lo < hi) {
    int32_t mid = (lo + hi) / 2;
    const kio_tuple &t = tm.tuples[mid];
    bool less = t.phone != phone ? t.phone < phone
              : t.hmm_state != hmm_state ? t.hmm_state < hmm_state
              : t.forward_pdf != fpdf ? t.forward_pdf < fpdf : t.self_loop_pdf < spdf;
    if (less) lo = mid + 1; else hi = mid;
  }
  if (lo >= tm.num_tuples) throw Error("TupleToTransitionState: tuple not found");
  const kio_tuple &t = tm.tuples[lo];
  if (t.phone != phone || t.hmm_state != hmm_state || t.forward_pdf != fpdf ||
      t.self_loop_pdf != spdf)
    throw Error("TupleToTransitionState: tuple not found");
  return lo + 1;
}

// H: one HMM per phone-in-context label (shared between labels with the same
// phone and pdfs), self-loops left out; disambiguation labels become new
// input symbols after the last transition-id.
// HMMs of phones in context, kept across the utterances one thread compiles
// (an HMM depends only on the phone window and the model): by window, and by
// (phone, pdfs) as Kaldi shares them within one H.
struct HmmCache {
  std::unordered_map<std::vector<int32_t>, VFst *, VecHash> by_window;
  std::map<std::pair<int32_t, std::vector<int32_t> >, VFst *> by_pdfs;  // owns
  HmmCache() = default;
  HmmCache(const HmmCache &) = delete;
  HmmCache &operator=(const HmmCache &) = delete;
  ~HmmCache();
};
VFst *MakeH(const std::vector<std::vector<int32_t> > &info, const kio_ctx_dep &tree,
            const kio_tmodel &tm, float transition_scale, HmmCache *cache,
            std::vector<int32_t> *disambig_h);

// Kaldi's AddSelfLoops with reorder = true or false (disambig list empty).
void AddSelfLoops(const kio_tmodel &tm, float self_loop_scale, bool reorder, VFst *f);

}  // namespace tgraph
#endif
