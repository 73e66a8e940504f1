// OpenFst operations on a VectorFst<StdArc> with the same result as
// OpenFst's own (states, arcs, weights and the stored property bits), done on
// flat arrays instead of OpenFst's generic visitors (C++ bridge only, internal
// to train-graphs/).
#ifndef TGRAPH_OPS_H
#define TGRAPH_OPS_H

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <fst/fstlib.h>

namespace tgraph {

// Per-thread scratch arrays of the searches below, kept between calls.
struct ConnectScratch {
  std::vector<uint8_t> mark;          // bit 0: accessible, bit 1: coaccessible
  std::vector<int32_t> stack;         // states to visit
  std::vector<int32_t> rev_start;     // reverse arcs per state (CSR)
  std::vector<int32_t> rev;           // source state of each reverse arc
  std::vector<typename fst::StdArc::StateId> dstates;
};

// Marks in sc.mark the states a final state is reachable from (bit 1) and,
// when with_access, those reachable from the start state (bit 0), the sets
// of OpenFst's SccVisitor (reachability does not depend on the visiting
// order). Co-reachability: sweeps from the last state to the first, each
// marking a state whose final weight is not Zero or that has an arc to a
// marked state; states are mostly numbered along their arcs, so one sweep
// usually marks them all. A sweep that marks nothing more is the fixpoint;
// after a few sweeps, a backward search on reversed arcs finishes it.
template <class F>
void MarkReach(const F &f, bool with_access, ConnectScratch *sc) {
  typedef typename F::Arc A;
  typedef typename A::StateId S;
  const S n = f.NumStates(), start = f.Start();
  sc->mark.assign(n, 0);
  sc->stack.clear();
  if (with_access && start != fst::kNoStateId) {
    sc->mark[start] |= 1;
    sc->stack.push_back(start);
    while (!sc->stack.empty()) {
      const S s = sc->stack.back();
      sc->stack.pop_back();
      for (fst::ArcIterator<F> it(f, s); !it.Done(); it.Next()) {
        const S t = it.Value().nextstate;
        if (!(sc->mark[t] & 1)) {
          sc->mark[t] |= 1;
          sc->stack.push_back(t);
        }
      }
    }
  }
  uint8_t *m = sc->mark.data();
  S marked = 0;
  bool changed = true;
  for (int sweep = 0; changed && marked < n && sweep < 3; sweep++) {
    changed = false;
    for (S s = n - 1; s >= 0; s--) {
      if (m[s] & 2) continue;
      bool co = f.Final(s) != A::Weight::Zero();
      for (fst::ArcIterator<F> it(f, s); !co && !it.Done(); it.Next()) co = (m[it.Value().nextstate] & 2) != 0;
      if (co) {
        m[s] |= 2;
        marked++;
        changed = true;
      }
    }
  }
  if (!changed || marked == n) return;
  sc->rev_start.assign(n + 1, 0);
  size_t na = 0;
  for (S s = 0; s < n; s++) {
    for (fst::ArcIterator<F> it(f, s); !it.Done(); it.Next()) sc->rev_start[it.Value().nextstate + 1]++;
    na += f.NumArcs(s);
  }
  for (S s = 0; s < n; s++) sc->rev_start[s + 1] += sc->rev_start[s];
  sc->rev.resize(na);
  std::vector<int32_t> &fill = sc->stack;  // reverse arcs, filled from the back
  fill.assign(sc->rev_start.begin() + 1, sc->rev_start.end());
  for (S s = 0; s < n; s++)
    for (fst::ArcIterator<F> it(f, s); !it.Done(); it.Next()) sc->rev[--fill[it.Value().nextstate]] = s;
  sc->stack.clear();
  for (S s = 0; s < n; s++)
    if (m[s] & 2) sc->stack.push_back(s);
  while (!sc->stack.empty()) {
    const S s = sc->stack.back();
    sc->stack.pop_back();
    for (int32_t k = sc->rev_start[s]; k < sc->rev_start[s + 1]; k++) {
      const S t = sc->rev[k];
      if (!(m[t] & 2)) {
        m[t] |= 2;
        sc->stack.push_back(t);
      }
    }
  }
}

inline ConnectScratch &Scratch() {
  static thread_local ConnectScratch sc;
  return sc;
}

// fst::Connect(f): the states not both reachable from the start state and
// co-reachable from a final state are deleted (none when there is no start
// state: OpenFst's DFS then visits nothing) by DeleteStates, which also
// updates the property bits, even when the list is empty; then the
// accessible and coaccessible bits are set.
template <class F>
void Connect(F *f) {
  typedef typename F::Arc::StateId S;
  ConnectScratch &sc = Scratch();
  sc.dstates.clear();
  if (f->Start() != fst::kNoStateId) {
    MarkReach(*f, true, &sc);
    const S n = f->NumStates();
    for (S s = 0; s < n; s++)
      if (sc.mark[s] != 3) sc.dstates.push_back(s);
  }
  f->DeleteStates(sc.dstates);
  f->SetProperties(fst::kAccessible | fst::kCoAccessible, fst::kAccessible | fst::kCoAccessible);
}

// fst::RmFinalEpsilon(f) with the Connect above: final states whose arcs
// all lead to states no final state is reachable from lose their epsilon
// in-arcs, the arcs' weight moving into the source's final weight.
template <class F>
void RmFinalEpsilon(F *f) {
  typedef typename F::Arc A;
  typedef typename A::StateId S;
  typedef typename A::Weight W;
  ConnectScratch &sc = Scratch();
  const S n = f->NumStates();
  if (f->Start() == fst::kNoStateId) {
    // OpenFst's DFS visits nothing: no state is coaccessible.
    sc.mark.assign(n, 0);
  } else {
    MarkReach(*f, false, &sc);
  }
  std::vector<uint8_t> finals(n, 0);
  for (S s = 0; s < n; s++) {
    if (f->Final(s) != W::Zero()) {
      bool future = false;
      for (fst::ArcIterator<F> it(*f, s); !it.Done(); it.Next()) {
        if (sc.mark[it.Value().nextstate] & 2) {
          future = true;
          break;
        }
      }
      if (!future) finals[s] = 1;
    }
  }
  std::vector<A> arcs;
  for (S s = 0; s < n; s++) {
    W weight = f->Final(s);
    arcs.clear();
    for (fst::ArcIterator<F> it(*f, s); !it.Done(); it.Next()) {
      const A &arc = it.Value();
      if (finals[arc.nextstate] && arc.ilabel == 0 && arc.olabel == 0)
        weight = fst::Plus(fst::Times(f->Final(arc.nextstate), arc.weight), weight);
      else
        arcs.push_back(arc);
    }
    if (arcs.size() < f->NumArcs(s)) {
      f->DeleteArcs(s);
      f->SetFinal(s, weight);
      for (const A &arc : arcs) f->AddArc(s, arc);
    }
  }
  Connect(f);
}

// OpenFst's EncodeMapper with kEncodeLabels | kEncodeWeights, for fst::ArcMap:
// the same labels (1, 2, ... in the order the (ilabel, olabel, weight)
// triples are first met; a final weight other than Zero is the triple
// (kNoLabel, kNoLabel, weight) on an arc to a superfinal state), property
// bits and symbol actions; the table is an open-addressing hash on the
// triple's bits instead of one heap node per arc. The weights are quantized
// before encoding, so equal weights have equal bits (no -0.0, no NaN).
template <class A>
class Encoder {
 public:
  typedef typename A::Label L;
  typedef typename A::Weight W;
  struct Triple {
    L ilabel, olabel;
    W weight;
  };
  explicit Encoder(fst::EncodeType type) : type_(type), own_(new Table) {}
  Encoder(const Encoder &e, fst::EncodeType type) : type_(type), own_(), t_(e.t_) {}

  A operator()(const A &arc) {
    if (type_ == fst::ENCODE) {
      if (arc.nextstate == fst::kNoStateId && arc.weight == W::Zero()) return arc;
      const L label = arc.nextstate == fst::kNoStateId
                          ? t_->Encode(fst::kNoLabel, fst::kNoLabel, arc.weight)
                          : t_->Encode(arc.ilabel, arc.olabel, arc.weight);
      return A(label, label, W::One(), arc.nextstate);
    }
    if (arc.nextstate == fst::kNoStateId || arc.ilabel == 0) return arc;
    const Triple &tr = t_->triples[arc.ilabel - 1];
    if (tr.ilabel == fst::kNoLabel) return A(0, 0, tr.weight, arc.nextstate);
    return A(tr.ilabel, tr.olabel, tr.weight, arc.nextstate);
  }
  fst::MapFinalAction FinalAction() const {
    return type_ == fst::ENCODE ? fst::MAP_REQUIRE_SUPERFINAL : fst::MAP_NO_SUPERFINAL;
  }
  fst::MapSymbolsAction InputSymbolsAction() const { return fst::MAP_CLEAR_SYMBOLS; }
  fst::MapSymbolsAction OutputSymbolsAction() const { return fst::MAP_CLEAR_SYMBOLS; }
  uint64 Properties(uint64 inprops) const {
    return inprops & fst::kILabelInvariantProperties & fst::kOLabelInvariantProperties &
           fst::kWeightInvariantProperties &
           (type_ == fst::ENCODE ? fst::kAddSuperFinalProperties : fst::kRmSuperFinalProperties);
  }
  // Encode's and Decode's symbol tables (copies, as OpenFst's table keeps).
  void SetSymbols(const fst::SymbolTable *in, const fst::SymbolTable *out) {
    t_->isyms.reset(in ? in->Copy() : nullptr);
    t_->osyms.reset(out ? out->Copy() : nullptr);
  }
  const fst::SymbolTable *InputSymbols() const { return t_->isyms.get(); }
  const fst::SymbolTable *OutputSymbols() const { return t_->osyms.get(); }

 private:
  struct Table {
    std::vector<Triple> triples;
    std::vector<L> slots;  // label of the triple, 0 = free
    std::unique_ptr<fst::SymbolTable> isyms, osyms;
    static uint32_t Bits(const W &w) {
      float v = w.Value();
      uint32_t b;
      memcpy(&b, &v, 4);
      return b;
    }
    L Encode(L il, L ol, const W &w) {
      if (slots.size() < 2 * (triples.size() + 1)) Grow();
      const uint32_t wb = Bits(w);
      const size_t mask = slots.size() - 1;
      size_t h = (static_cast<uint64_t>(static_cast<uint32_t>(il)) * 0x9E3779B97F4A7C15ull) ^
                 (static_cast<uint64_t>(static_cast<uint32_t>(ol)) * 0xC2B2AE3D27D4EB4Full) ^
                 (static_cast<uint64_t>(wb) * 0x165667B19E3779F9ull);
      h ^= h >> 29;
      for (size_t i = h & mask;; i = (i + 1) & mask) {
        const L l = slots[i];
        if (l == 0) {
          triples.push_back(Triple{il, ol, w});
          slots[i] = static_cast<L>(triples.size());
          return slots[i];
        }
        const Triple &t = triples[l - 1];
        if (t.ilabel == il && t.olabel == ol && Bits(t.weight) == wb) return l;
      }
    }
    void Grow() {
      std::vector<L> old;
      old.swap(slots);
      slots.assign(old.empty() ? 1024 : 2 * old.size(), 0);
      std::vector<Triple> tr;
      tr.swap(triples);
      tr.reserve(slots.size() / 2);
      triples.reserve(slots.size() / 2);
      for (const Triple &t : tr) Encode(t.ilabel, t.olabel, t.weight);
    }
  };
  fst::EncodeType type_;
  std::unique_ptr<Table> own_;
  Table *t_ = own_.get();
};

// fst::Encode(f, &mapper) with the Encoder above.
template <class F>
void Encode(F *f, Encoder<typename F::Arc> *e) {
  e->SetSymbols(f->InputSymbols(), f->OutputSymbols());
  fst::ArcMap(f, e);
}

// fst::Decode with the Encoder and RmFinalEpsilon above.
template <class F>
void Decode(F *f, const Encoder<typename F::Arc> &e) {
  Encoder<typename F::Arc> d(e, fst::DECODE);
  fst::ArcMap(f, &d);
  RmFinalEpsilon(f);
  f->SetInputSymbols(e.InputSymbols());
  f->SetOutputSymbols(e.OutputSymbols());
}

// OpenFst's internal::MergeStates with the Connect above.
template <class F>
void MergeStates(const fst::internal::Partition<typename F::Arc::StateId> &partition, F *f) {
  typedef typename F::Arc::StateId S;
  std::vector<S> state_map(partition.NumClasses());
  for (S i = 0; i < partition.NumClasses(); ++i) {
    fst::internal::PartitionIterator<S> siter(partition, i);
    state_map[i] = siter.Value();
  }
  for (S c = 0; c < partition.NumClasses(); ++c) {
    for (fst::internal::PartitionIterator<S> siter(partition, c); !siter.Done(); siter.Next()) {
      const S s = siter.Value();
      for (fst::MutableArcIterator<F> aiter(f, s); !aiter.Done(); aiter.Next()) {
        auto arc = aiter.Value();
        arc.nextstate = state_map[partition.ClassId(arc.nextstate)];
        if (s == state_map[c])
          aiter.SetValue(arc);
        else
          f->AddArc(state_map[c], std::move(arc));
      }
    }
  }
  f->SetStart(state_map[partition.ClassId(f->Start())]);
  Connect(f);
}

// OpenFst's internal::AcceptorMinimize with Connect above.
template <class F>
void AcceptorMinimize(F *f) {
  typedef typename F::Arc A;
  Connect(f);
  if (f->Start() == fst::kNoStateId) return;
  static constexpr auto revuz_props = fst::kAcyclic | fst::kIDeterministic;
  if (f->Properties(revuz_props, true) == revuz_props) {
    static const fst::ILabelCompare<A> comp;
    fst::ArcSort(f, comp);
    fst::internal::AcyclicMinimizer<A> minimizer(*f);
    MergeStates(minimizer.GetPartition(), f);
  } else {
    fst::internal::CyclicMinimizer<A, fst::LifoQueue<typename A::StateId> > minimizer(*f);
    MergeStates(minimizer.GetPartition(), f);
  }
  fst::ArcUniqueMapper<A> mapper(*f);
  fst::StateMap(f, mapper);
}

}  // namespace tgraph

#endif
