// The one C++ file: reads a binary OpenFst object (StdArc; vector or const
// type) from a C FILE* and flattens it into the CSR kio_fst of base/fst.h.
// Only extern "C" functions are exported and no exception escapes.
//
// The stream adapter is unbuffered (underflow/uflow via getc/ungetc, bulk
// reads via fread), so it never consumes a byte past the FST: in an archive
// the next key is still in the FILE* afterwards.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#include <exception>
#include <istream>
#include <memory>
#include <streambuf>
#include <string>

#include <fst/fst.h>
#include <fst/symbol-table.h>
#include <fst/vector-fst.h>

#include "fst-bridge.h"
#include "log.h"

namespace {

class FileInBuf : public std::streambuf {
 public:
  explicit FileInBuf(FILE *f) : f_(f), pos_(0) {
    long p = std::ftell(f);
    if (p > 0) pos_ = p;
  }

 protected:
  int_type underflow() override {
    int c = getc_unlocked(f_);
    if (c == EOF) return traits_type::eof();
    ungetc(c, f_);
    return traits_type::to_int_type(static_cast<char>(c));
  }
  int_type uflow() override {
    int c = getc_unlocked(f_);
    if (c == EOF) return traits_type::eof();
    pos_++;
    return traits_type::to_int_type(static_cast<char>(c));
  }
  std::streamsize xsgetn(char *s, std::streamsize n) override {
    if (n <= 0) return 0;
    size_t got = fread_unlocked(s, 1, static_cast<size_t>(n), f_);
    pos_ += static_cast<long long>(got);
    return static_cast<std::streamsize>(got);
  }
  // Only "where am I" is supported (OpenFst's AlignInput and MappedFile
  // logging ask for it); the position is the file offset when known.
  pos_type seekoff(off_type off, std::ios_base::seekdir dir,
                   std::ios_base::openmode) override {
    if (off == 0 && dir == std::ios_base::cur) return pos_type(pos_);
    return pos_type(off_type(-1));
  }
  pos_type seekpos(pos_type p, std::ios_base::openmode) override {
    if (static_cast<long long>(p) == pos_) return p;
    return pos_type(off_type(-1));
  }

 private:
  FILE *f_;
  long long pos_;
};

int Flatten(const fst::Fst<fst::StdArc> &in, kio_fst *g) {
  using fst::StdArc;
  const auto *ex = dynamic_cast<const fst::ExpandedFst<StdArc> *>(&in);
  if (!ex) {
    kio_set_error("FST is not an expanded FST");
    return KIO_ERR;
  }
  int64_t ns = ex->NumStates();
  int64_t na = 0;
  for (int64_t s = 0; s < ns; s++) na += static_cast<int64_t>(ex->NumArcs(s));
  if (kio_fst_reserve(g, ns, na) != KIO_OK) return KIO_ERR;
  int64_t start = ex->Start();
  if (start < -1 || start >= ns) {
    kio_set_error("FST start state %lld out of range (%lld states)",
                  static_cast<long long>(start), static_cast<long long>(ns));
    return KIO_ERR;
  }
  g->start = static_cast<int32_t>(start);
  int64_t k = 0;
  for (int64_t s = 0; s < ns; s++) {
    g->arc_start[s] = static_cast<int32_t>(k);
    g->final[s] = ex->Final(static_cast<StdArc::StateId>(s)).Value();
    for (fst::ArcIterator<fst::Fst<StdArc>> ai(in, static_cast<StdArc::StateId>(s));
         !ai.Done(); ai.Next()) {
      const StdArc &a = ai.Value();
      if (a.nextstate < 0 || a.nextstate >= ns) {
        kio_set_error("FST arc from state %lld to invalid state %d",
                      static_cast<long long>(s), static_cast<int>(a.nextstate));
        return KIO_ERR;
      }
      kio_arc &o = g->arcs[k++];
      o.ilabel = a.ilabel;
      o.olabel = a.olabel;
      o.weight = a.weight.Value();
      o.nextstate = a.nextstate;
    }
  }
  g->arc_start[ns] = static_cast<int32_t>(k);
  return KIO_OK;
}

// ConstFst body (OpenFst const-fst.h layout): optional padding to 16 bytes,
// nstates x {f32 final, u32 pos, u32 narcs, u32 niepsilons, u32 noepsilons},
// padding, narcs x {i32 ilabel, i32 olabel, f32 weight, i32 nextstate}.
// Parsed here rather than through ConstFst so that every pos/narcs can be
// checked before any arc is touched (ConstFst trusts them).
bool AlignInput(std::istream &is) {
  for (int i = 0; i < 16; i++) {
    std::streamoff pos = is.tellg();
    if (pos < 0) return false;
    if (pos % 16 == 0) return true;
    char c;
    if (!is.read(&c, 1)) return false;
  }
  return true;
}

int ReadConstBody(std::istream &is, const fst::FstHeader &hdr, kio_fst *g) {
  if (hdr.Version() < 1) {
    kio_set_error("const FST has unsupported version %d", static_cast<int>(hdr.Version()));
    return KIO_ERR;
  }
  // Symbol tables, if any, sit between header and body: skip them.
  for (int32_t flag : {static_cast<int32_t>(fst::FstHeader::HAS_ISYMBOLS),
                       static_cast<int32_t>(fst::FstHeader::HAS_OSYMBOLS)}) {
    if (hdr.GetFlags() & flag) {
      std::unique_ptr<fst::SymbolTable> st(fst::SymbolTable::Read(is, "[unknown]"));
      if (!st) { kio_set_error("bad symbol table in const FST"); return KIO_ERR; }
    }
  }
  bool aligned = hdr.Version() == 1 || (hdr.GetFlags() & fst::FstHeader::IS_ALIGNED);
  int64_t ns = hdr.NumStates(), na = hdr.NumArcs();
  if (ns < 0) { kio_set_error("const FST without state count"); return KIO_ERR; }
  if (kio_fst_reserve(g, ns, na) != KIO_OK) return KIO_ERR;
  if (hdr.Start() < -1 || hdr.Start() >= ns) {
    kio_set_error("FST start state %lld out of range", static_cast<long long>(hdr.Start()));
    return KIO_ERR;
  }
  g->start = static_cast<int32_t>(hdr.Start());
  if (aligned && !AlignInput(is)) { kio_set_error("const FST: alignment failed"); return KIO_ERR; }
  for (int64_t s = 0; s < ns; s++) {
    float fw;
    uint32_t u[4];
    if (!is.read(reinterpret_cast<char *>(&fw), 4) ||
        !is.read(reinterpret_cast<char *>(u), 16)) {
      kio_set_error("const FST truncated in state %lld", static_cast<long long>(s));
      return KIO_ERR;
    }
    // Arcs must be laid out contiguously, state by state, as OpenFst writes.
    // arc_start[s] already holds the end of state s-1's arcs (0 for s = 0).
    int64_t expect = g->arc_start[s];
    if (u[0] != expect || static_cast<int64_t>(u[0]) + u[1] > na) {
      kio_set_error("const FST state %lld has bad arc range", static_cast<long long>(s));
      return KIO_ERR;
    }
    g->final[s] = fw;
    g->arc_start[s] = static_cast<int32_t>(u[0]);
    g->arc_start[s + 1] = static_cast<int32_t>(u[0] + u[1]);
  }
  if (g->arc_start[ns] != na) {
    kio_set_error("const FST: arcs of states do not add up to %lld", static_cast<long long>(na));
    return KIO_ERR;
  }
  if (aligned && !AlignInput(is)) { kio_set_error("const FST: alignment failed"); return KIO_ERR; }
  for (int64_t k = 0; k < na; k++) {
    int32_t a[4];
    if (!is.read(reinterpret_cast<char *>(a), 16)) {
      kio_set_error("const FST truncated in arc %lld", static_cast<long long>(k));
      return KIO_ERR;
    }
    kio_arc &o = g->arcs[k];
    o.ilabel = a[0];
    o.olabel = a[1];
    std::memcpy(&o.weight, &a[2], 4);
    o.nextstate = a[3];
    if (o.nextstate < 0 || o.nextstate >= ns) {
      kio_set_error("const FST arc %lld to invalid state %d", static_cast<long long>(k),
                    static_cast<int>(o.nextstate));
      return KIO_ERR;
    }
  }
  return KIO_OK;
}

// VectorFst body (OpenFst vector-fst.h, file version 2) when the header
// gives the state count, which Kaldi's graph writers always do: per state
// f32 final, i64 narcs, narcs x 16-byte arcs laid out exactly like kio_arc.
// Read straight into the CSR arrays: several times faster than building a
// VectorFst and copying it, with the same checks.
// The body is read straight from the FILE* (the stream adapter is unbuffered,
// so the FILE position is exactly after the header and symbol tables).
int ReadVectorBody(std::istream &is, FILE *f, const fst::FstHeader &hdr, kio_fst *g) {
  if (hdr.Version() < 2) {
    kio_set_error("vector FST has unsupported version %d", static_cast<int>(hdr.Version()));
    return KIO_ERR;
  }
  for (int32_t flag : {static_cast<int32_t>(fst::FstHeader::HAS_ISYMBOLS),
                       static_cast<int32_t>(fst::FstHeader::HAS_OSYMBOLS)}) {
    if (hdr.GetFlags() & flag) {
      std::unique_ptr<fst::SymbolTable> st(fst::SymbolTable::Read(is, "[unknown]"));
      if (!st) { kio_set_error("bad symbol table in vector FST"); return KIO_ERR; }
    }
  }
  int64_t ns = hdr.NumStates();
  // Arc count unknown until the end: grow geometrically from a guess.
  static_assert(sizeof(kio_arc) == 16, "kio_arc must match OpenFst's StdArc layout");
  int64_t cap = g->arc_cap > 0 ? static_cast<int64_t>(g->arc_cap) : 4 * ns + 16;
  if (cap > (1 << 20)) cap = 1 << 20;
  if (kio_fst_reserve(g, ns, cap) != KIO_OK) return KIO_ERR;
  if (hdr.Start() < -1 || hdr.Start() >= ns) {
    kio_set_error("FST start state %lld out of range", static_cast<long long>(hdr.Start()));
    return KIO_ERR;
  }
  g->start = static_cast<int32_t>(hdr.Start());
  int64_t na = 0;
  for (int64_t s = 0; s < ns; s++) {
    char b[12];
    if (fread_unlocked(b, 1, 12, f) != 12) {
      kio_set_error("vector FST truncated in state %lld", static_cast<long long>(s));
      return KIO_ERR;
    }
    int64_t narcs;
    std::memcpy(&g->final[s], b, 4);
    std::memcpy(&narcs, b + 4, 8);
    if (narcs < 0 || narcs > INT32_MAX - na - 65536) {
      kio_set_error("vector FST state %lld has %lld arcs", static_cast<long long>(s),
                    static_cast<long long>(narcs));
      return KIO_ERR;
    }
    g->arc_start[s] = static_cast<int32_t>(na);
    // Arcs are read in chunks, growing the array as data really arrives, so
    // a lying narcs fails at the end of the stream without a huge allocation.
    for (int64_t left = narcs; left > 0;) {
      int64_t chunk = left < 65536 ? left : 65536;
      if (na + chunk > cap) {
        int64_t nc = cap;
        while (nc < na + chunk) nc *= 2;
        if (nc > INT32_MAX) nc = INT32_MAX;
        // grows the arc array only; contents and states are kept
        if (kio_fst_reserve(g, ns, nc) != KIO_OK) return KIO_ERR;
        g->start = static_cast<int32_t>(hdr.Start());
        cap = nc;
      }
      if (fread_unlocked(g->arcs + na, 16, static_cast<size_t>(chunk), f) !=
          static_cast<size_t>(chunk)) {
        kio_set_error("vector FST truncated in the arcs of state %lld",
                      static_cast<long long>(s));
        return KIO_ERR;
      }
      for (int64_t k = na; k < na + chunk; k++) {
        int32_t d = g->arcs[k].nextstate;
        if (d < 0 || d >= ns) {
          kio_set_error("FST arc from state %lld to invalid state %d",
                        static_cast<long long>(s), static_cast<int>(d));
          return KIO_ERR;
        }
      }
      na += chunk;
      left -= chunk;
    }
  }
  g->arc_start[ns] = static_cast<int32_t>(na);
  g->num_arcs = static_cast<int32_t>(na);
  return KIO_OK;
}

int ReadOpenFst(FILE *f, kio_fst *g) {
  FileInBuf buf(f);
  std::istream is(&buf);
  fst::FstHeader hdr;
  if (!hdr.Read(is, "[unknown]")) {
    kio_set_error("bad OpenFst header");
    return KIO_ERR;
  }
  if (hdr.ArcType() != fst::StdArc::Type()) {
    kio_set_error("FST has arc type %s, expected %s", hdr.ArcType().c_str(),
                  fst::StdArc::Type().c_str());
    return KIO_ERR;
  }
  // Refuse absurd sizes before anything is reserved for them.
  if (hdr.NumStates() > INT32_MAX - 1 || hdr.NumStates() < -1 ||
      hdr.NumArcs() > INT32_MAX || hdr.NumArcs() < 0) {
    kio_set_error("FST header has bad sizes (%lld states, %lld arcs)",
                  static_cast<long long>(hdr.NumStates()),
                  static_cast<long long>(hdr.NumArcs()));
    return KIO_ERR;
  }
  if (hdr.FstType() == "const") return ReadConstBody(is, hdr, g);
  if (hdr.FstType() != "vector") {
    kio_set_error("unsupported FST type %s (vector or const expected)",
                  hdr.FstType().c_str());
    return KIO_ERR;
  }
  if (hdr.NumStates() >= 0) return ReadVectorBody(is, f, hdr, g);
  // No state count (written to a non-seekable stream by a non-expanded FST):
  // let OpenFst read to the end of the stream, as Kaldi would.
  fst::FstReadOptions ropts("[unknown]", &hdr);
  std::unique_ptr<fst::StdVectorFst> t(fst::StdVectorFst::Read(is, ropts));
  if (!t) {
    kio_set_error("failed to read vector FST (truncated or corrupt)");
    return KIO_ERR;
  }
  return Flatten(*t, g);
}

}  // namespace

extern "C" int kio_fst_read_openfst(FILE *f, kio_fst *g) {
  try {
    return ReadOpenFst(f, g);
  } catch (const std::exception &e) {
    kio_set_error("exception reading FST: %s", e.what());
  } catch (...) {
    kio_set_error("unknown exception reading FST");
  }
  return KIO_ERR;
}
