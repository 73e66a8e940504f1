// The one C++ file: reads a binary OpenFst object (StdArc; vector or const
// type) from a C FILE* and flattens it into the CSR kio_fst of base/fst.h.
// Only extern "C" functions are exported and no exception escapes.
//
// The stream adapter is unbuffered (underflow/uflow via getc/ungetc, bulk
// reads via fread), so it never consumes a byte past the FST: in an archive
// the next key is still in the FILE* afterwards.
#include <cstdio>
#include <exception>
#include <istream>
#include <memory>
#include <streambuf>
#include <string>

#include <fst/expanded-fst.h>
#include <fst/fst.h>

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
  if (hdr.FstType() != "vector" && hdr.FstType() != "const") {
    kio_set_error("unsupported FST type %s (vector or const expected)",
                  hdr.FstType().c_str());
    return KIO_ERR;
  }
  // Refuse absurd sizes before OpenFst reserves memory for them.
  if (hdr.NumStates() > INT32_MAX - 1 || hdr.NumStates() < -1 ||
      hdr.NumArcs() > INT32_MAX || hdr.NumArcs() < 0) {
    kio_set_error("FST header has bad sizes (%lld states, %lld arcs)",
                  static_cast<long long>(hdr.NumStates()),
                  static_cast<long long>(hdr.NumArcs()));
    return KIO_ERR;
  }
  fst::FstReadOptions ropts("[unknown]", &hdr);
  std::unique_ptr<fst::Fst<fst::StdArc>> t(fst::Fst<fst::StdArc>::Read(is, ropts));
  if (!t) {
    kio_set_error("failed to read %s FST (truncated or corrupt)", hdr.FstType().c_str());
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
