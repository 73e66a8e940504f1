// Determinization with epsilon removal in one pass ("determinize-star"), as
// Kaldi's training-graph compiler runs it in the log semiring. Internal to
// train-graphs/ (C++ bridge only). State numbering, arc order, the order in
// which weights are added and the subset hash are those of Kaldi's
// DeterminizerStar, so graphs come out byte-identical: subsets are processed
// last-in first-out, arcs of a subset are grouped by input label after a
// (label, state) sort, epsilon closure is breadth-first with pending weights.
#ifndef TGRAPH_DET_H
#define TGRAPH_DET_H

#include <algorithm>
#include <deque>
#include <limits>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fst/fstlib.h>

namespace tgraph {

// Sequences of labels as integer ids: the empty sequence and single labels
// have fixed ids, longer sequences are numbered as they are first seen.
template <class Label>
class SeqTable {
 public:
  typedef Label Id;
  SeqTable()
      : no_symbol_(std::numeric_limits<Id>::max() / 2),
        single_start_(std::numeric_limits<Id>::max() / 2 + 1),
        single_range_(std::numeric_limits<Id>::max() - single_start_) {}
  ~SeqTable() { for (auto *v : seqs_) delete v; }
  Id Empty() const { return no_symbol_; }
  Id OfLabel(Label l) {
    if (l >= 0 && l <= single_range_) return l + single_start_;
    std::vector<Label> v(1, l);
    return Intern(v);
  }
  Id Of(const std::vector<Label> &v) {
    if (v.empty()) return no_symbol_;
    if (v.size() == 1) return OfLabel(v[0]);
    return Intern(v);
  }
  void Get(Id id, std::vector<Label> *v) const {
    if (id == no_symbol_) {
      v->clear();
    } else if (id >= single_start_) {
      v->assign(1, id - single_start_);
    } else {
      *v = *seqs_[id];
    }
  }
  Id DropPrefix(Id id, size_t n) {
    if (n == 0) return id;
    std::vector<Label> v;
    Get(id, &v);
    std::vector<Label> rest(v.begin() + n, v.end());
    return Of(rest);
  }

 private:
  struct Hash {
    size_t operator()(const std::vector<Label> *v) const {
      size_t h = 0, f = 1;
      for (Label l : *v) { h += f * l; f *= 103333; }
      return h;
    }
  };
  struct Eq {
    bool operator()(const std::vector<Label> *a, const std::vector<Label> *b) const {
      return *a == *b;
    }
  };
  Id Intern(const std::vector<Label> &v) {
    auto it = map_.find(&v);
    if (it != map_.end()) return it->second;
    Id id = static_cast<Id>(seqs_.size());
    auto *copy = new std::vector<Label>(v);
    seqs_.push_back(copy);
    map_[copy] = id;
    return id;
  }
  Id no_symbol_, single_start_, single_range_;
  std::vector<std::vector<Label> *> seqs_;
  std::unordered_map<const std::vector<Label> *, Id, Hash, Eq> map_;
};

struct DetError : std::runtime_error {
  explicit DetError(const char *m) : std::runtime_error(m) {}
};

// Arc: the FST's arcs; Weight: the semiring the determinization runs in
// (Kaldi casts the graph to the log semiring; the float values are the same,
// so here the weights are converted where they are read and written).
template <class Arc, class Weight>
class DetStar {
  typedef typename Arc::Label Label;
  typedef typename Arc::Weight ArcWeight;
  typedef typename Arc::StateId StateId;
  typedef Label StrId;

  struct Elem {
    StateId state;
    StrId string;
    Weight weight;
  };
  struct OutArc {
    Label ilabel;
    StrId ostring;
    StateId nextstate;  // kNoStateId: a final weight
    Weight weight;
  };
  typedef std::vector<Elem> Subset;
  struct SubsetHash {
    size_t operator()(const Subset *s) const {
      size_t h = 0, f = 1;
      for (const Elem &e : *s) {
        h *= f;
        // Kaldi adds an int (state + 103333 * string, wrapping): the same
        // value without signed overflow.
        int32_t v = static_cast<int32_t>(static_cast<uint32_t>(e.state) +
                                         103333u * static_cast<uint32_t>(e.string));
        h += static_cast<size_t>(static_cast<int64_t>(v));
        f *= 23531;
      }
      return h;
    }
  };
  struct SubsetEq {
    float delta;
    explicit SubsetEq(float d) : delta(d) {}
    bool operator()(const Subset *a, const Subset *b) const {
      if (a->size() != b->size()) return false;
      for (size_t i = 0; i < a->size(); i++) {
        const Elem &x = (*a)[i], &y = (*b)[i];
        if (x.state != y.state || x.string != y.string ||
            !fst::ApproxEqual(x.weight, y.weight, delta))
          return false;
      }
      return true;
    }
  };
  typedef std::unordered_map<const Subset *, StateId, SubsetHash, SubsetEq> Hash;

  struct ClosureInfo {
    Elem elem;
    Weight pending;
    bool queued;
    ClosureInfo() {}
    ClosureInfo(const Elem &e, const Weight &w, bool q) : elem(e), pending(w), queued(q) {}
    bool operator<(const ClosureInfo &o) const { return elem.state < o.elem.state; }
  };

 public:
  // max_states > 0: DetError once the output has more states (Kaldi's
  // max_states), or the epsilon closure loops more often than that.
  DetStar(const fst::Fst<Arc> &ifst, float delta, int max_states = -1)
      : ifst_(ifst.Copy()), delta_(delta), max_states_(max_states),
        hash_(ifst.Properties(fst::kExpanded, false)
                  ? static_cast<const fst::ExpandedFst<Arc> &>(ifst).NumStates() / 2 + 3
                  : 20,
              SubsetHash(), SubsetEq(delta)) {}
  ~DetStar() {
    delete ifst_;
    for (auto &p : hash_) delete p.first;
  }

  void Run() {
    StateId start = ifst_->Start();
    if (start == fst::kNoStateId) return;
    Subset s0(1);
    s0[0].state = start;
    s0[0].weight = Weight::One();
    s0[0].string = seqs_.Empty();
    ToState(s0);
    while (!queue_.empty()) {
      std::pair<Subset *, StateId> cur = queue_.front();
      queue_.pop_front();
      Closure(*cur.first, &closed_);
      Final(closed_, cur.second);
      Transitions(closed_, cur.second);
      if (max_states_ > 0 && out_.size() > static_cast<size_t>(max_states_))
        throw DetError("Determinization aborted since passed the maximum number of states");
    }
  }

  // The result with output strings spelled out on chains of new states.
  void Output(fst::MutableFst<Arc> *ofst) {
    StateId n = static_cast<StateId>(out_.size());
    ofst->DeleteStates();
    if (n == 0) {
      ofst->SetStart(fst::kNoStateId);
      return;
    }
    ofst->ReserveStates(n);
    for (StateId s = 0; s < n; s++) ofst->AddState();
    ofst->SetStart(0);
    std::vector<Label> seq;
    for (StateId s = 0; s < n; s++) {
      ofst->ReserveArcs(s, out_[s].size());  // one arc from s per output arc
      for (const OutArc &a : out_[s]) {
        seqs_.Get(a.ostring, &seq);
        if (a.nextstate == fst::kNoStateId) {
          StateId cur = s;
          for (size_t i = 0; i < seq.size(); i++) {
            StateId next = ofst->AddState();
            ofst->AddArc(cur, Arc(0, seq[i], W(i == 0 ? a.weight : Weight::One()), next));
            cur = next;
          }
          ofst->SetFinal(cur, W(seq.empty() ? a.weight : Weight::One()));
        } else {
          StateId cur = s;
          for (size_t i = 0; i + 1 < seq.size(); i++) {
            StateId next = ofst->AddState();
            ofst->AddArc(cur, Arc(i == 0 ? a.ilabel : 0, seq[i],
                                  W(i == 0 ? a.weight : Weight::One()), next));
            cur = next;
          }
          ofst->AddArc(cur, Arc(seq.size() <= 1 ? a.ilabel : 0,
                                seq.empty() ? 0 : seq.back(),
                                W(seq.size() <= 1 ? a.weight : Weight::One()), a.nextstate));
        }
      }
      std::vector<OutArc>().swap(out_[s]);
    }
  }

 private:
  static ArcWeight W(const Weight &w) { return ArcWeight(w.Value()); }
  static Weight L(const ArcWeight &w) { return Weight(w.Value()); }

  StateId ToState(const Subset &s) {
    auto it = hash_.find(&s);
    if (it != hash_.end()) return it->second;
    Subset *copy = new Subset(s);
    StateId id = static_cast<StateId>(out_.size());
    hash_.insert(std::make_pair(copy, id));
    out_.emplace_back();
    queue_.push_front(std::make_pair(copy, id));
    return id;
  }

  void Final(const Subset &closed, StateId state) {
    bool is_final = false;
    StrId fstr = 0;
    Weight fw = Weight::One();
    for (const Elem &e : closed) {
      Weight w = L(ifst_->Final(e.state));
      if (w != Weight::Zero()) {
        if (!is_final) {
          fstr = e.string;
          fw = Times(e.weight, w);
          is_final = true;
        } else {
          if (fstr != e.string) throw DetError("FST was not functional -> not determinizable");
          fw = Plus(fw, Times(e.weight, w));
        }
      }
    }
    if (is_final) out_[state].push_back(OutArc{0, fstr, fst::kNoStateId, fw});
  }

  void Transitions(const Subset &closed, StateId state) {
    std::vector<std::pair<Label, Elem> > &all = all_;
    std::vector<Label> &seq = seq_;
    all.clear();
    for (const Elem &e : closed) {
      for (fst::ArcIterator<fst::Fst<Arc> > it(*ifst_, e.state); !it.Done(); it.Next()) {
        const Arc &arc = it.Value();
        if (arc.ilabel == 0) continue;
        std::pair<Label, Elem> p;
        p.first = arc.ilabel;
        p.second.state = arc.nextstate;
        p.second.weight = Times(e.weight, L(arc.weight));
        if (arc.olabel == 0) {
          p.second.string = e.string;
        } else {
          seqs_.Get(e.string, &seq);
          seq.push_back(arc.olabel);
          p.second.string = seqs_.Of(seq);
        }
        all.push_back(p);
      }
    }
    std::sort(all.begin(), all.end(), PairLess());
    Subset &sub = sub_;
    for (size_t i = 0; i < all.size();) {
      Label l = all[i].first;
      sub.clear();
      while (i < all.size() && all[i].first == l) sub.push_back(all[i++].second);
      Transition(state, l, &sub);
    }
  }

  struct PairLess {
    bool operator()(const std::pair<Label, Elem> &a, const std::pair<Label, Elem> &b) {
      if (a.first < b.first) return true;
      if (a.first > b.first) return false;
      return a.second.state < b.second.state;
    }
  };

  void Transition(StateId state, Label ilabel, Subset *sub) {
    {  // one element per state, weights added in sorted order
      size_t in = 0, out = 0, n = sub->size();
      while (in < n) {
        if (in != out) (*sub)[out] = (*sub)[in];
        in++;
        while (in < n && (*sub)[in].state == (*sub)[out].state) {
          if ((*sub)[in].string != (*sub)[out].string)
            throw DetError("FST was not functional -> not determinizable");
          (*sub)[out].weight = Plus((*sub)[out].weight, (*sub)[in].weight);
          in++;
        }
        out++;
      }
      sub->resize(out);
    }
    std::vector<Label> &prefix = prefix_, &tmp = tmp_;
    prefix.clear();
    for (size_t i = 0; i < sub->size(); i++) {
      if (i == 0) {
        seqs_.Get((*sub)[i].string, &prefix);
      } else {
        seqs_.Get((*sub)[i].string, &tmp);
        if (tmp.size() < prefix.size()) prefix.resize(tmp.size());
        for (size_t j = 0; j < prefix.size(); j++)
          if (tmp[j] != prefix[j]) prefix.resize(j);
      }
      if (prefix.empty()) break;
    }
    StrId common = seqs_.Of(prefix);
    Weight tot = (*sub)[0].weight;
    for (size_t i = 1; i < sub->size(); i++) tot = Plus(tot, (*sub)[i].weight);
    for (Elem &e : *sub) {
      e.weight = Divide(e.weight, tot);
      e.string = seqs_.DropPrefix(e.string, prefix.size());
    }
    OutArc a;
    a.ilabel = ilabel;
    a.nextstate = ToState(*sub);
    a.ostring = common;
    a.weight = tot;
    out_[state].push_back(a);
  }

  // ---- epsilon closure ----
  void Closure(const Subset &in, Subset *out) {
    info_.resize(0);
    bool sorted = (ifst_->Properties(fst::kILabelSorted, false) & fst::kILabelSorted) != 0;
    for (const Elem &e : in) Expand(e, sorted, e.weight, true);
    size_t n2 = queue2_.size();
    if (n2 == 0) {
      *out = in;
      return;
    }
    for (const Elem &e : in) {
      info_.push_back(ClosureInfo(e, e.weight, false));
      info_.back().elem.weight = Weight::Zero();
      if (index_.size() < static_cast<size_t>(e.state) + 1) index_.resize(2 * e.state + 1, -1);
      index_[e.state] = static_cast<int>(info_.size()) - 1;
    }
    {
      Elem e;
      e.weight = Weight::Zero();
      for (size_t i = 0; i < n2; i++) {
        e.state = queue2_[i].state;
        e.string = queue2_[i].string;
        Add(e, queue2_[i].weight);
      }
      queue2_.resize(0);
    }
    int counter = 0;
    while (!queue_eps_.empty()) {
      if (max_states_ > 0 && counter++ > max_states_)
        throw DetError("Determinization aborted since looped too often during epsilon closure");
      StateId id = queue_eps_.front();
      ClosureInfo &ci = info_[index_[id]];
      Elem &e = ci.elem;
      Weight w = ci.pending;
      e.weight = Plus(e.weight, w);
      ci.pending = Weight::Zero();
      ci.queued = false;
      queue_eps_.pop_front();
      Expand(e, sorted, w, false);
    }
    std::sort(info_.begin(), info_.end());
    out->clear();
    out->reserve(info_.size());
    for (ClosureInfo &ci : info_) {
      if (ci.pending != Weight::Zero()) ci.elem.weight = Plus(ci.elem.weight, ci.pending);
      out->push_back(ci.elem);
    }
  }

  void Add(const Elem &e, const Weight &w) {
    int index = -1;
    if (static_cast<size_t>(e.state) < index_.size()) index = index_[e.state];
    if (index != -1) {
      if (static_cast<size_t>(index) >= info_.size() || info_[index].elem.state != e.state)
        index = -1;
    }
    if (index == -1) {
      info_.push_back(ClosureInfo(e, w, true));
      if (index_.size() < static_cast<size_t>(e.state) + 1) index_.resize(2 * e.state + 1, -1);
      index_[e.state] = static_cast<int>(info_.size()) - 1;
      queue_eps_.push_back(e.state);
    } else {
      ClosureInfo &ci = info_[index];
      if (ci.elem.string != e.string)
        throw DetError("FST was not functional -> not determinizable.");
      ci.pending = Plus(ci.pending, w);
      if (!ci.queued) {
        Weight sum = Plus(ci.elem.weight, ci.pending);
        if (!fst::ApproxEqual(sum, ci.elem.weight, delta_)) {
          ci.queued = true;
          queue_eps_.push_back(e.state);
        }
      }
    }
  }

  void Expand(const Elem &e, bool sorted, const Weight &w, bool to_queue2) {
    StrId str = e.string;
    std::vector<Label> seq;
    for (fst::ArcIterator<fst::Fst<Arc> > it(*ifst_, e.state); !it.Done(); it.Next()) {
      const Arc &arc = it.Value();
      if (sorted && arc.ilabel > 0) break;
      if (arc.ilabel != 0) continue;
      Elem next;
      next.state = arc.nextstate;
      next.weight = Weight::Zero();
      Weight nw = Times(w, L(arc.weight));
      if (arc.olabel == 0) {
        next.string = str;
      } else {
        seqs_.Get(str, &seq);
        seq.push_back(arc.olabel);
        next.string = seqs_.Of(seq);
      }
      if (to_queue2) {
        next.weight = nw;
        queue2_.push_back(next);
      } else {
        Add(next, nw);
      }
    }
  }

  const fst::Fst<Arc> *ifst_;
  float delta_;
  int max_states_;
  Hash hash_;
  std::deque<std::pair<Subset *, StateId> > queue_;
  std::vector<std::vector<OutArc> > out_;
  SeqTable<Label> seqs_;
  // scratch, kept between states (fewer allocations)
  Subset closed_, sub_;
  std::vector<std::pair<Label, Elem> > all_;
  std::vector<Label> seq_, prefix_, tmp_;
  // closure scratch
  std::deque<StateId> queue_eps_;
  std::vector<Elem> queue2_;
  std::vector<int> index_;
  std::vector<ClosureInfo> info_;
};

}  // namespace tgraph
#endif
