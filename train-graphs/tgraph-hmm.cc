// H transducer and self-loops (Kaldi's hmm-utils), against OpenFst types.
// Internal to train-graphs/.
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "tgraph-fst.h"

namespace tgraph {

namespace {

VFst *HmmFst(const std::vector<int32_t> &window, const kio_ctx_dep &tree, const kio_tmodel &tm,
             float scale, HmmCache *hc) {
  auto w = hc->by_window.find(window);
  if (w != hc->by_window.end()) return w->second;
  auto *cache = &hc->by_pdfs;
  if (static_cast<int32_t>(window.size()) != tree.context_width)
    throw Error("Context size mismatch, ilabel-info [from context FST is " +
                std::to_string(window.size()) + ", context-dependency object expects " +
                std::to_string(tree.context_width));
  int32_t phone = window[tree.central_position];
  if (phone == 0) throw Error("phone == 0.  Some mismatch happened, or there is a code error.");
  const kio_topo_entry &e = TopoEntry(tm, phone);
  std::vector<int32_t> pdfs(NumPdfClasses(e));
  for (int32_t c = 0; c < static_cast<int32_t>(pdfs.size()); c++) {
    if (!kio_ctx_dep_compute(&tree, window.data(), c, &pdfs[c])) {
      std::string w;
      for (int32_t p : window) w += std::to_string(p) + " ";
      throw Error("GetHmmAsFsa: context-dependency object could not produce an answer: "
                  "pdf-class = " + std::to_string(c) + " ctx-window = " + w +
                  ".  This probably points to either a coding error in some graph-building "
                  "process, a mismatch of topology with context-dependency object, the wrong "
                  "FST being passed on a command-line, or something of  that general nature.");
    }
  }
  auto key = std::make_pair(phone, pdfs);
  auto it = cache->find(key);
  if (it != cache->end()) {
    hc->by_window[window] = it->second;
    return it->second;
  }

  VFst *f = new VFst;
  std::vector<StateId> ids;
  for (int32_t i = 0; i < e.num_states; i++) ids.push_back(f->AddState());
  f->SetStart(ids[0]);
  f->SetFinal(ids.back(), Weight::One());
  for (int32_t h = 0; h < e.num_states; h++) {
    const kio_topo_state &st = e.states[h];
    for (int32_t k = 0; k < st.num_trans; k++) {
      int32_t dest = st.trans[k].dest;
      if (dest == h) continue;  // self-loops are added at the end
      if (st.forward_pdf_class < 0) {
        delete f;
        throw Error("topology with a non-emitting state that has transitions: not supported");
      }
      int32_t ts = TupleToTs(tm, phone, h, pdfs[st.forward_pdf_class],
                             pdfs[st.self_loop_pdf_class]);
      int32_t tid = tm.first_tid[ts] + k;
      float log_prob = tm.log_probs[tid] - tm.nonloop_log_prob[ts];
      f->AddArc(ids[h], Arc(tid, tid, Weight(-log_prob), ids[dest]));
    }
  }
  // Kaldi removes epsilons locally here: with every arc labelled that only
  // adds a scratch state and connects the FST again.
  f->AddState();
  tgraph::Connect(f);
  for (fst::StateIterator<VFst> si(*f); !si.Done(); si.Next()) {
    StateId s = si.Value();
    for (fst::MutableArcIterator<VFst> ai(f, s); !ai.Done(); ai.Next()) {
      Arc a = ai.Value();
      a.weight = Weight(a.weight.Value() * scale);
      ai.SetValue(a);
    }
    if (f->Final(s) != Weight::Zero()) f->SetFinal(s, Weight(f->Final(s).Value() * scale));
  }
  (*cache)[key] = f;
  hc->by_window[window] = f;
  return f;
}

VFst *LoopFst(const std::vector<const VFst *> &fsts) {
  VFst *ans = new VFst;
  StateId loop = ans->AddState();
  ans->SetStart(loop);
  ans->SetFinal(loop, Weight::One());
  std::unordered_map<const VFst *, Arc> cache;
  for (Label i = 0; i < static_cast<Label>(fsts.size()); i++) {
    const VFst *f = fsts[i];
    if (!f) continue;
    auto c = cache.find(f);
    if (c != cache.end()) {
      Arc a = c->second;
      a.olabel = i;
      ans->AddArc(0, a);
      continue;
    }
    StateId n = f->NumStates(), start = f->Start();
    if (start == fst::kNoStateId) continue;
    bool share = f->Properties(fst::kInitialAcyclic, true) == fst::kInitialAcyclic &&
                 f->NumArcs(start) == 1 && f->Final(start) == Weight::Zero();
    std::vector<StateId> map(n);
    for (StateId s = 0; s < n; s++) map[s] = (s == start && share) ? loop : ans->AddState();
    if (!share) {
      Arc a(0, i, Weight::One(), map[start]);
      cache[f] = a;
      ans->AddArc(0, a);
    }
    for (StateId s = 0; s < n; s++) {
      for (fst::ArcIterator<VFst> ai(*f, s); !ai.Done(); ai.Next()) {
        const Arc &a = ai.Value();
        Arc na(a.ilabel, (s == start && share) ? i : 0, a.weight, map[a.nextstate]);
        ans->AddArc(map[s], na);
        if (s == start && share) cache[f] = na;
      }
      if (f->Final(s) != Weight::Zero()) ans->AddArc(map[s], Arc(0, 0, f->Final(s), loop));
    }
  }
  return ans;
}

// Transition-id -> transition-state (0 for epsilon, -1 for "none").
struct TsClass {
  const kio_tmodel &tm;
  int32_t operator()(Label l) const {
    if (l == fst::kNoLabel) return -1;
    if (l >= 1 && l <= tm.num_tids) {
      if (tm.tid_is_self_loop[l]) throw Error("AddSelfLoops: graph already has self-loops.");
      return tm.tid2ts[l];
    }
    if (l != 0) throw Error("AddSelfLoops: label " + std::to_string(l) + " is not a transition-id");
    return 0;
  }
};

void PrecedingSameClass(VFst *f, const TsClass &cls) {
  std::vector<int32_t> classes;
  const int32_t none = cls(fst::kNoLabel), eps = cls(0);
  StateId start = f->Start();
  if (start < 0) return;
  classes.resize(start + 1, none);
  classes[start] = eps;
  std::vector<char> bad;  // by state: entered by arcs of different classes
  bool any_bad = false;
  for (fst::StateIterator<VFst> si(*f); !si.Done(); si.Next()) {
    StateId s = si.Value();
    for (fst::ArcIterator<VFst> ai(*f, s); !ai.Done(); ai.Next()) {
      const Arc &a = ai.Value();
      if (classes.size() <= static_cast<size_t>(a.nextstate)) classes.resize(a.nextstate + 1, none);
      if (classes[a.nextstate] == none) {
        classes[a.nextstate] = cls(a.ilabel);
      } else if (classes[a.nextstate] != cls(a.ilabel)) {
        if (bad.size() <= static_cast<size_t>(a.nextstate)) bad.resize(a.nextstate + 1, 0);
        bad[a.nextstate] = 1;
        any_bad = true;
      }
    }
  }
  if (!any_bad) return;
  std::vector<std::pair<StateId, size_t> > change;
  for (fst::StateIterator<VFst> si(*f); !si.Done(); si.Next()) {
    StateId s = si.Value();
    for (fst::ArcIterator<VFst> ai(*f, s); !ai.Done(); ai.Next()) {
      const Arc &a = ai.Value();
      if (a.ilabel != 0 && static_cast<size_t>(a.nextstate) < bad.size() && bad[a.nextstate])
        change.push_back(std::make_pair(s, ai.Position()));
    }
  }
  std::map<std::pair<StateId, int32_t>, StateId> smap;
  for (const auto &c : change) {
    StateId s = c.first;
    fst::ArcIterator<VFst> ai(*f, s);
    ai.Seek(c.second);
    Arc a = ai.Value();
    std::pair<StateId, int32_t> p(a.nextstate, cls(a.ilabel));
    if (smap.count(p) == 0) {
      StateId ns = smap[p] = f->AddState();
      f->AddArc(ns, Arc(0, 0, Weight::One(), a.nextstate));
    }
    a.nextstate = smap[p];
    fst::MutableArcIterator<VFst> mi(f, s);
    mi.Seek(c.second);
    mi.SetValue(a);
  }
}

void FollowingSameClass(VFst *f, const TsClass &cls) {
  std::vector<StateId> bad;
  const int32_t none = cls(fst::kNoLabel), eps = cls(0);
  for (fst::StateIterator<VFst> si(*f); !si.Done(); si.Next()) {
    StateId s = si.Value();
    int32_t c = none;
    bool b = false;
    for (fst::ArcIterator<VFst> ai(*f, s); !ai.Done(); ai.Next()) {
      int32_t k = cls(ai.Value().ilabel);
      if (c == none) c = k;
      else if (c != k) { b = true; break; }
    }
    if (c != none && c != eps && f->Final(s) != Weight::Zero()) b = true;
    if (b) bad.push_back(s);
  }
  std::vector<Arc> arcs;
  for (StateId s : bad) {
    arcs.clear();
    for (fst::ArcIterator<VFst> ai(*f, s); !ai.Done(); ai.Next())
      arcs.push_back(ai.Value());
    for (size_t j = 0; j < arcs.size(); j++) {
      Arc &a = arcs[j];
      if (a.ilabel != 0) {
        StateId ns = f->AddState();
        f->AddArc(ns, Arc(a.ilabel, 0, Weight::One(), a.nextstate));
        fst::MutableArcIterator<VFst> mi(f, s);
        mi.Seek(j);
        mi.SetValue(Arc(0, a.olabel, a.weight, ns));
      }
    }
  }
}

}  // namespace

HmmCache::~HmmCache() {
  for (auto &c : by_pdfs) delete c.second;
}

VFst *MakeH(const std::vector<std::vector<int32_t> > &info, const kio_ctx_dep &tree,
            const kio_tmodel &tm, float transition_scale, HmmCache *cache,
            std::vector<int32_t> *disambig_h) {
  std::vector<const VFst *> fsts(info.size(), nullptr);
  std::vector<VFst *> owned;
  disambig_h->clear();
  int32_t next_disambig = tm.num_tids + 1;
  try {
    for (size_t j = 1; j < info.size(); j++) {
      if (info[j].size() == 1 && info[j][0] <= 0) {
        int32_t d = next_disambig++;
        disambig_h->push_back(d);
        VFst *f = new VFst;
        owned.push_back(f);
        f->AddState();
        f->AddState();
        f->SetStart(0);
        f->SetFinal(1, Weight::One());
        f->AddArc(0, Arc(d, d, Weight::One(), 1));
        fsts[j] = f;
      } else {
        fsts[j] = HmmFst(info[j], tree, tm, transition_scale, cache);
      }
    }
  } catch (...) {
    for (VFst *f : owned) delete f;
    throw;
  }
  VFst *ans = LoopFst(fsts);
  for (VFst *f : owned) delete f;
  return ans;
}

void AddSelfLoops(const kio_tmodel &tm, float scale, bool reorder, VFst *f) {
  TsClass cls{tm};
  if (reorder) {
    PrecedingSameClass(f, cls);
    std::vector<int32_t> in(f->NumStates(), -1);
    for (fst::StateIterator<VFst> si(*f); !si.Done(); si.Next()) {
      StateId s = si.Value();
      for (fst::ArcIterator<VFst> ai(*f, s); !ai.Done(); ai.Next()) {
        const Arc &a = ai.Value();
        int32_t t = cls(a.ilabel);
        if (in[a.nextstate] == -1) in[a.nextstate] = t;
        else if (in[a.nextstate] != t) throw Error("AddSelfLoops: inconsistent input classes");
      }
    }
    for (StateId s = 0; s < static_cast<StateId>(in.size()); s++) {
      if (in[s] <= 0) continue;
      int32_t ts = in[s];
      float lp = tm.nonloop_log_prob[ts];
      f->SetFinal(s, Times(f->Final(s), Weight(-lp * scale)));
      for (fst::MutableArcIterator<VFst> ai(f, s); !ai.Done(); ai.Next()) {
        Arc a = ai.Value();
        a.weight = Times(a.weight, Weight(-lp * scale));
        ai.SetValue(a);
      }
      int32_t tid = kio_ts_self_loop(&tm, ts);
      if (tid != 0) {
        float l = tm.log_probs[tid];
        f->AddArc(s, Arc(tid, 0, Weight(-l * scale), s));
      }
    }
  } else {
    FollowingSameClass(f, cls);
    StateId n = f->NumStates();
    for (StateId s = 0; s < n; s++) {
      int32_t my = -1;
      for (fst::MutableArcIterator<VFst> ai(f, s); !ai.Done(); ai.Next()) {
        Arc a = ai.Value();
        if (my == -1) my = cls(a.ilabel);
        else if (my != cls(a.ilabel)) throw Error("AddSelfLoops: inconsistent input classes");
        if (my > 0) {
          float lp = tm.nonloop_log_prob[my];
          a.weight = Times(a.weight, Weight(-lp * scale));
          ai.SetValue(a);
        }
      }
      if (my != fst::kNoLabel && my != 0) {
        int32_t tid = kio_ts_self_loop(&tm, my);
        if (tid != 0) {
          float l = tm.log_probs[tid];
          f->AddArc(s, Arc(tid, 0, Weight(-l * scale), s));
        }
      }
    }
  }
}

}  // namespace tgraph
