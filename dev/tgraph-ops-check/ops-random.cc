// Random FSTs through train-graphs' flat-array operations (tgraph-ops.h) and
// through OpenFst's own, compared byte for byte (states, arcs, weights and
// the stored property bits, as VectorFst::Write writes them). The FSTs have
// unreachable and dead states, back arcs, epsilons and final states whose
// arcs lead nowhere, so every branch of Connect / RmFinalEpsilon (including
// the co-reachability fallback) runs. Build and run from the repository root:
//   g++ -std=c++17 -O1 -I. -Itrain-graphs dev/tgraph-ops-check/ops-random.cc -lfst -o /tmp/ops-random
//   /tmp/ops-random 20000
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>

#include "tgraph-ops.h"

typedef fst::StdArc Arc;
typedef fst::VectorFst<Arc> VFst;

static std::string Bytes(const VFst &f) {
  std::ostringstream os;
  f.Write(os, fst::FstWriteOptions());
  return os.str();
}

static VFst Random(std::mt19937 *rng) {
  std::uniform_int_distribution<int> ns(0, 40), lab(0, 4), pct(0, 99);
  VFst f;
  const int n = ns(*rng);
  for (int s = 0; s < n; s++) f.AddState();
  if (n > 0 && pct(*rng) < 95) f.SetStart(std::uniform_int_distribution<int>(0, n - 1)(*rng));
  for (int s = 0; s < n; s++) {
    if (pct(*rng) < 20) f.SetFinal(s, Arc::Weight(0.5f * lab(*rng)));
    const int na = std::uniform_int_distribution<int>(0, 3)(*rng);
    for (int k = 0; k < na; k++) {
      // Mostly forward arcs (as composition numbers states), some backward.
      int t = pct(*rng) < 75 ? std::min(n - 1, s + 1 + lab(*rng)) : std::uniform_int_distribution<int>(0, n - 1)(*rng);
      f.AddArc(s, Arc(lab(*rng), lab(*rng), Arc::Weight(0.25f * lab(*rng)), t));
    }
  }
  return f;
}

int main(int argc, char **argv) {
  const int iters = argc > 1 ? atoi(argv[1]) : 10000;
  std::mt19937 rng(12345);
  int bad = 0;
  for (int i = 0; i < iters; i++) {
    VFst f = Random(&rng);
    // Connect
    VFst a = f, b = f;
    fst::Connect(&a);
    tgraph::Connect(&b);
    if (Bytes(a) != Bytes(b)) { printf("Connect differs at %d\n", i); bad++; }
    // RmFinalEpsilon (OpenFst's reads past an empty vector without a start
    // state; the compiler never calls it on such an FST)
    if (f.Start() != fst::kNoStateId) {
      a = f; b = f;
      fst::RmFinalEpsilon(&a);
      tgraph::RmFinalEpsilon(&b);
      if (Bytes(a) != Bytes(b)) { printf("RmFinalEpsilon differs at %d\n", i); bad++; }
    }
    // Encoded minimisation of a deterministic acceptor, as the
    // compiler does it (quantize, encode, minimise, decode).
    VFst acc = f, d;
    fst::Project(&acc, fst::ProjectType::INPUT);
    fst::ArcMap(&acc, fst::RmWeightMapper<Arc>());  // determinizable
    fst::Determinize(acc, &d);
    for (fst::StateIterator<VFst> si(d); !si.Done(); si.Next()) {  // weights again
      for (fst::MutableArcIterator<VFst> ai(&d, si.Value()); !ai.Done(); ai.Next()) {
        Arc arc = ai.Value();
        arc.weight = Arc::Weight(0.25f * (rng() % 3));
        ai.SetValue(arc);
      }
      if (d.Final(si.Value()) != Arc::Weight::Zero()) d.SetFinal(si.Value(), Arc::Weight(0.5f * (rng() % 3)));
    }
    a = d; b = d;
    fst::ArcMap(&a, fst::QuantizeMapper<Arc>(fst::kDelta));
    fst::ArcMap(&b, fst::QuantizeMapper<Arc>(fst::kDelta));
    fst::EncodeMapper<Arc> ea(fst::kEncodeLabels | fst::kEncodeWeights, fst::ENCODE);
    fst::Encode(&a, &ea);
    tgraph::Encoder<Arc> eb(fst::ENCODE);
    tgraph::Encode(&b, &eb);
    if (Bytes(a) != Bytes(b)) { printf("Encode differs at %d\n", i); bad++; }
    fst::internal::AcceptorMinimize(&a);
    tgraph::AcceptorMinimize(&b);
    if (Bytes(a) != Bytes(b)) { printf("AcceptorMinimize differs at %d\n", i); bad++; }
    fst::Decode(&a, ea);
    tgraph::Decode(&b, eb);
    if (Bytes(a) != Bytes(b)) { printf("Decode differs at %d\n", i); bad++; }
    if (bad > 10) break;
  }
  printf("%d random FSTs, %d differences\n", iters, bad);
  return bad != 0;
}
