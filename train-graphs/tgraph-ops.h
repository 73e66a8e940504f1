// OpenFst operations on a VectorFst<StdArc> with the same result as
// OpenFst's own (states, arcs, weights and the stored property bits), done on
// flat arrays instead of OpenFst's generic visitors (C++ bridge only, internal
// to train-graphs/).
#ifndef TGRAPH_OPS_H
#define TGRAPH_OPS_H

#include <cstdint>
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
// when with_access, those reachable from the start state (bit 0). Plain
// forward and backward searches: reachability does not depend on the
// visiting order, so the sets are those of OpenFst's SccVisitor.
template <class F>
void MarkReach(const F &f, bool with_access, ConnectScratch *sc) {
  typedef typename F::Arc A;
  typedef typename A::StateId S;
  const S n = f.NumStates(), start = f.Start();
  sc->mark.assign(n, 0);
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
  for (S s = 0; s < n; s++) {
    if (f.Final(s) != A::Weight::Zero()) {
      sc->mark[s] |= 2;
      sc->stack.push_back(s);
    }
  }
  while (!sc->stack.empty()) {
    const S s = sc->stack.back();
    sc->stack.pop_back();
    for (int32_t k = sc->rev_start[s]; k < sc->rev_start[s + 1]; k++) {
      const S t = sc->rev[k];
      if (!(sc->mark[t] & 2)) {
        sc->mark[t] |= 2;
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

// fst::Decode with the RmFinalEpsilon above.
template <class F>
void Decode(F *f, const fst::EncodeMapper<typename F::Arc> &mapper) {
  fst::ArcMap(f, fst::EncodeMapper<typename F::Arc>(mapper, fst::DECODE));
  RmFinalEpsilon(f);
  f->SetInputSymbols(mapper.InputSymbols());
  f->SetOutputSymbols(mapper.OutputSymbols());
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
