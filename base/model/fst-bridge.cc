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
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include <exception>
#include <istream>
#include <memory>
#include <streambuf>
#include <string>

#include <fst/fst.h>

#include "fst-bridge.h"
#include "base/sys/log.h"

namespace {

class FileInBuf : public std::streambuf {
 public:
  // pos: the stream offset of the FILE's current position (for tellg).
  FileInBuf(FILE *f, long long pos) : f_(f), pos_(pos) {}

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

// Robustness (fuzzing, tests/fuzz): nothing from the stream is handed to
// OpenFst's own readers. FstHeader::Read and SymbolTable::Read loop over an
// int32 string length / int64 symbol count without checking the stream, so a
// few corrupt bytes hang them or allocate gigabytes; VectorFst::Read reserves
// a state's arc count before reading the arcs. The header and symbol tables
// are therefore parsed here with limits, and every body is read into arrays
// that grow only as data really arrives.

// Strings in headers and symbol tables longer than this are corruption.
constexpr int32_t kMaxHeaderString = 4096;
constexpr int32_t kFstMagic = 2125659606;
constexpr int32_t kSymbolTableMagic = 2125658996;

bool ReadBytes(FILE *f, void *dst, size_t n, long long *consumed) {
  size_t got = fread_unlocked(dst, 1, n, f);
  *consumed += static_cast<long long>(got);
  return got == n;
}

bool ReadHeaderString(FILE *f, std::string *s, long long *consumed) {
  int32_t n;
  if (!ReadBytes(f, &n, 4, consumed)) return false;
  if (n > kMaxHeaderString) return false;
  s->clear();
  if (n <= 0) return true;  // OpenFst reads a non-positive length as ""
  s->resize(static_cast<size_t>(n));
  return ReadBytes(f, &(*s)[0], static_cast<size_t>(n), consumed);
}

// FstHeader::Read's layout: magic, fsttype, arctype, version, flags,
// properties, start, numstates, numarcs.
bool ReadHeader(FILE *f, fst::FstHeader *hdr, long long *consumed) {
  int32_t magic, version, flags;
  uint64_t props;
  int64_t start, ns, na;
  std::string fsttype, arctype;
  if (!ReadBytes(f, &magic, 4, consumed) || magic != kFstMagic ||
      !ReadHeaderString(f, &fsttype, consumed) || !ReadHeaderString(f, &arctype, consumed) ||
      !ReadBytes(f, &version, 4, consumed) || !ReadBytes(f, &flags, 4, consumed) ||
      !ReadBytes(f, &props, 8, consumed) || !ReadBytes(f, &start, 8, consumed) ||
      !ReadBytes(f, &ns, 8, consumed) || !ReadBytes(f, &na, 8, consumed))
    return false;
  hdr->SetFstType(fsttype);
  hdr->SetArcType(arctype);
  hdr->SetVersion(version);
  hdr->SetFlags(static_cast<uint32_t>(flags));
  hdr->SetProperties(props);
  hdr->SetStart(start);
  hdr->SetNumStates(ns);
  hdr->SetNumArcs(na);
  return true;
}

// Skips one binary SymbolTable (magic, name, available key, size, then size x
// {string, int64 key}); the tables are not needed, only passed over.
bool SkipSymbolTable(std::istream &is) {
  auto read_str = [&is]() {
    int32_t n;
    if (!is.read(reinterpret_cast<char *>(&n), 4) || n > kMaxHeaderString) return false;
    char buf[256];
    for (int32_t left = n; left > 0;) {
      int32_t k = left < 256 ? left : 256;
      if (!is.read(buf, k)) return false;
      left -= k;
    }
    return true;
  };
  int32_t magic;
  int64_t avail, size, key;
  if (!is.read(reinterpret_cast<char *>(&magic), 4) || magic != kSymbolTableMagic ||
      !read_str() || !is.read(reinterpret_cast<char *>(&avail), 8) ||
      !is.read(reinterpret_cast<char *>(&size), 8) || size < 0)
    return false;
  for (int64_t i = 0; i < size; i++)  // stops at the end of the data
    if (!read_str() || !is.read(reinterpret_cast<char *>(&key), 8)) return false;
  return true;
}

bool SkipSymbolTables(std::istream &is, const fst::FstHeader &hdr, const char *what) {
  for (uint32_t flag : {static_cast<uint32_t>(fst::FstHeader::HAS_ISYMBOLS),
                        static_cast<uint32_t>(fst::FstHeader::HAS_OSYMBOLS)}) {
    if ((hdr.GetFlags() & flag) && !SkipSymbolTable(is)) {
      kio_set_error("bad symbol table in %s FST", what);
      return false;
    }
  }
  return true;
}

// Makes room for at least ns states and na arcs (contents kept), growing
// geometrically and never beyond the limits (the header's counts, when
// known, else INT32_MAX - 1). kio_fst_reserve resets start/num_*: callers
// set them once the body is complete.
int Grow(kio_fst *g, int64_t ns, int64_t na, int64_t max_ns, int64_t max_na) {
  int64_t sc = static_cast<int64_t>(g->state_cap), ac = static_cast<int64_t>(g->arc_cap);
  if (g->arc_start && g->arcs && ns <= sc && na <= ac) return KIO_OK;
  int64_t nsc = sc, nac = ac;
  if (!g->arc_start || ns > sc) {
    nsc = sc < 1024 ? 1024 : 2 * sc;
    if (nsc < ns) nsc = ns;
    if (nsc > max_ns) nsc = max_ns < ns ? ns : max_ns;
  }
  if (!g->arcs || na > ac) {
    nac = ac < 4096 ? 4096 : 2 * ac;
    if (nac < na) nac = na;
    if (nac > max_na) nac = max_na < na ? na : max_na;
  }
  return kio_fst_reserve(g, nsc, nac);
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
  if (!SkipSymbolTables(is, hdr, "const")) return KIO_ERR;
  bool aligned = hdr.Version() == 1 || (hdr.GetFlags() & fst::FstHeader::IS_ALIGNED);
  int64_t ns = hdr.NumStates(), na = hdr.NumArcs();
  if (ns < 0) { kio_set_error("const FST without state count"); return KIO_ERR; }
  if (hdr.Start() < -1 || hdr.Start() >= ns) {
    kio_set_error("FST start state %lld out of range", static_cast<long long>(hdr.Start()));
    return KIO_ERR;
  }
  if (Grow(g, 0, 0, ns, na) != KIO_OK) return KIO_ERR;
  if (aligned && !AlignInput(is)) { kio_set_error("const FST: alignment failed"); return KIO_ERR; }
  for (int64_t s = 0; s < ns; s++) {
    float fw;
    uint32_t u[4];
    if (!is.read(reinterpret_cast<char *>(&fw), 4) ||
        !is.read(reinterpret_cast<char *>(u), 16)) {
      kio_set_error("const FST truncated in state %lld", static_cast<long long>(s));
      return KIO_ERR;
    }
    if (Grow(g, s + 1, 0, ns, na) != KIO_OK) return KIO_ERR;
    // Arcs must be laid out contiguously, state by state, as OpenFst writes.
    int64_t expect = s ? g->arc_start[s] : 0;
    if (u[0] != expect || static_cast<int64_t>(u[0]) + u[1] > na) {
      kio_set_error("const FST state %lld has bad arc range", static_cast<long long>(s));
      return KIO_ERR;
    }
    g->final[s] = fw;
    g->arc_start[s] = static_cast<int32_t>(u[0]);
    g->arc_start[s + 1] = static_cast<int32_t>(u[0] + u[1]);
  }
  if ((ns ? g->arc_start[ns] : 0) != na) {
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
    if (Grow(g, ns, k + 1, ns, na) != KIO_OK) return KIO_ERR;
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
  if (kio_fst_reserve(g, ns, na) != KIO_OK) return KIO_ERR;  // sets the counts
  if (ns) g->arc_start[0] = 0;
  g->start = static_cast<int32_t>(hdr.Start());
  return KIO_OK;
}

// VectorFst body (OpenFst vector-fst.h, file version 2): per state f32
// final, i64 narcs, narcs x 16-byte arcs laid out exactly like kio_arc.
// Read straight into the CSR arrays: several times faster than building a
// VectorFst and copying it, with the same checks. Without a state count in
// the header (a non-expanded FST written to a pipe), states are read until
// the stream ends, as VectorFst::Read does.
// The body is read straight from the FILE* (the stream adapter is unbuffered,
// so the FILE position is exactly after the header and symbol tables).
int ReadVectorBody(std::istream &is, FILE *f, const fst::FstHeader &hdr, kio_fst *g) {
  if (hdr.Version() < 2) {
    kio_set_error("vector FST has unsupported version %d", static_cast<int>(hdr.Version()));
    return KIO_ERR;
  }
  if (!SkipSymbolTables(is, hdr, "vector")) return KIO_ERR;
  static_assert(sizeof(kio_arc) == 16, "kio_arc must match OpenFst's StdArc layout");
  const int64_t hdr_ns = hdr.NumStates();  // -1: unknown
  const int64_t max_ns = hdr_ns >= 0 ? hdr_ns : INT32_MAX - 1;
  if (Grow(g, 0, 0, max_ns, INT32_MAX) != KIO_OK) return KIO_ERR;
  int64_t na = 0, s = 0;
  for (; hdr_ns < 0 || s < hdr_ns; s++) {
    char b[12];
    size_t got = fread_unlocked(b, 1, 12, f);
    if (hdr_ns < 0 && got < 4) break;  // no further final weight: the end
    if (got != 12) {
      kio_set_error("vector FST truncated in state %lld", static_cast<long long>(s));
      return KIO_ERR;
    }
    if (s >= INT32_MAX - 1) {
      kio_set_error("vector FST has too many states");
      return KIO_ERR;
    }
    if (Grow(g, s + 1, na, max_ns, INT32_MAX) != KIO_OK) return KIO_ERR;
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
      if (Grow(g, s + 1, na + chunk, max_ns, INT32_MAX) != KIO_OK) return KIO_ERR;
      if (fread_unlocked(g->arcs + na, 16, static_cast<size_t>(chunk), f) !=
          static_cast<size_t>(chunk)) {
        kio_set_error("vector FST truncated in the arcs of state %lld",
                      static_cast<long long>(s));
        return KIO_ERR;
      }
      na += chunk;
      left -= chunk;
    }
  }
  const int64_t ns = s;
  // Destinations are checked once the state count is known.
  for (int64_t k = 0; k < na; k++) {
    int32_t d = g->arcs[k].nextstate;
    if (d < 0 || d >= ns) {
      kio_set_error("FST arc %lld to invalid state %d", static_cast<long long>(k),
                    static_cast<int>(d));
      return KIO_ERR;
    }
  }
  if (hdr.Start() < -1 || hdr.Start() >= ns) {
    kio_set_error("FST start state %lld out of range", static_cast<long long>(hdr.Start()));
    return KIO_ERR;
  }
  if (kio_fst_reserve(g, ns, na) != KIO_OK) return KIO_ERR;  // sets the counts
  g->arc_start[ns] = static_cast<int32_t>(na);
  g->start = static_cast<int32_t>(hdr.Start());
  return KIO_OK;
}

int ReadOpenFst(FILE *f, kio_fst *g) {
  long long pos = std::ftell(f);  // -1 on a pipe: offsets then count from here
  long long consumed = 0;
  fst::FstHeader hdr;
  if (!ReadHeader(f, &hdr, &consumed)) {
    kio_set_error("FstHeader::Read: bad or truncated FST header");
    return KIO_ERR;
  }
  FileInBuf buf(f, (pos > 0 ? pos : 0) + consumed);
  std::istream is(&buf);
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
  return ReadVectorBody(is, f, hdr, g);
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

// The archive read ahead's size of an entry (table.h, kio_body_bytes_fn):
// the bytes of a binary vector FST after its header, found by walking the
// states' arc counts in a buffer of its own filled with pread (the FILE is
// left after the header; the caller seeks past the body). -1 when it cannot
// tell cheaply or the data looks wrong (text, const type, symbol tables, no
// state count, a bad count, the file ending early): the entry is then read
// whole in order, with the reader's own checks and messages.
extern "C" int64_t kio_fst_body_bytes(FILE *f, int binary) {
  (void)binary;  // FSTs carry no Kaldi binary header: the object tells
  try {
    int c = getc_unlocked(f);
    if (c == EOF) return -1;
    ungetc(c, f);
    fst::FstHeader hdr;
    long long consumed = 0;
    if (!ReadHeader(f, &hdr, &consumed) || hdr.FstType() != "vector" || hdr.Version() < 2 ||
        hdr.ArcType() != fst::StdArc::Type() ||
        (hdr.GetFlags() & (fst::FstHeader::HAS_ISYMBOLS | fst::FstHeader::HAS_OSYMBOLS)) ||
        hdr.NumStates() < 0 || hdr.NumStates() > INT32_MAX - 1)
      return -1;
    const off_t base = ftello(f);
    struct stat st;
    if (base < 0 || fstat(fileno(f), &st) != 0) return -1;
    const int64_t avail = static_cast<int64_t>(st.st_size) - base;
    // Reads of 16 KiB first (a graph is a few), doubling up to 1 MiB.
    constexpr size_t kBuf = 1 << 20;
    size_t want = 16 << 10;
    std::vector<unsigned char> buf(want);
    int64_t pos = 0, wbeg = 0, wend = 0, na = 0;  // the buffer holds [wbeg, wend)
    for (int64_t s = 0, ns = hdr.NumStates(); s < ns; s++) {
      if (pos + 12 > wend) {
        if (pos + 12 > avail) return -1;
        if (buf.size() < want) buf.resize(want);
        ssize_t got = pread(fileno(f), buf.data(), want, base + pos);
        if (want < kBuf) want *= 2;
        if (got < 12) return -1;
        wbeg = pos;
        wend = pos + got;
      }
      int64_t narcs;
      std::memcpy(&narcs, buf.data() + (pos - wbeg) + 4, 8);
      if (narcs < 0 || narcs > INT32_MAX - na - 65536) return -1;
      na += narcs;
      pos += 12 + 16 * narcs;
    }
    return pos <= avail ? pos : -1;
  } catch (...) {
    return -1;
  }
}
