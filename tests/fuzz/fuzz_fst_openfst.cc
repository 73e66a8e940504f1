// libFuzzer harness, differential: every binary FST that kio_fst_read
// accepts is read again by OpenFst itself (fst::StdFst::Read on the same
// bytes) and the two graphs must be identical. Only inputs our reader
// accepted reach OpenFst: its own readers hang or allocate gigabytes on
// corrupt headers (the reason base/model/fst-bridge.cc parses them itself).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

#include <fst/fstlib.h>

extern "C" {
#include "base/model/fst.h"
#include "base/sys/log.h"
}

static void quiet(int, const char *, const char *, int, const char *, void *) {}

#define DIFF_CHECK(c)                                                              \
  do {                                                                        \
    if (!(c)) {                                                               \
      std::fprintf(stderr, "CHECK failed: %s (%s:%d)\n", #c, __FILE__, __LINE__); \
      std::abort();                                                           \
    }                                                                         \
  } while (0)

static bool same(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool init = false;
  if (!init) {
    init = true;
    if (!std::getenv("FUZZ_VERBOSE")) kio_log_set_handler(quiet, nullptr);
  }
  if (size == 0 || std::isspace(data[0])) return 0;  // text form: not OpenFst's
  std::string bytes(reinterpret_cast<const char *>(data), size);
  FILE *f = fmemopen(&bytes[0], size, "rb");
  if (!f) return 0;
  kio_fst g = {};
  int rc = kio_fst_read(f, &g);
  long used = std::ftell(f);
  std::fclose(f);
  if (rc == KIO_OK) {
    std::istringstream is(bytes.substr(0, static_cast<size_t>(used)));
    fst::FstReadOptions opts("fuzz");
    std::unique_ptr<fst::StdFst> o(fst::StdFst::Read(is, opts));
    DIFF_CHECK(o != nullptr);  // OpenFst must accept what we accepted
    DIFF_CHECK(o->Start() == g.start || (g.num_states == 0 && o->Start() == fst::kNoStateId));
    int32_t s = 0;
    for (fst::StateIterator<fst::StdFst> si(*o); !si.Done(); si.Next(), s++) {
      DIFF_CHECK(si.Value() == s && s < g.num_states);
      DIFF_CHECK(same(o->Final(s).Value(), g.final[s]));
      DIFF_CHECK(static_cast<int64_t>(o->NumArcs(s)) == g.arc_start[s + 1] - g.arc_start[s]);
      int32_t k = g.arc_start[s];
      for (fst::ArcIterator<fst::StdFst> ai(*o, s); !ai.Done(); ai.Next(), k++) {
        const fst::StdArc &a = ai.Value();
        const kio_arc &b = g.arcs[k];
        DIFF_CHECK(a.ilabel == b.ilabel && a.olabel == b.olabel && a.nextstate == b.nextstate &&
              same(a.weight.Value(), b.weight));
      }
    }
    DIFF_CHECK(s == g.num_states);
    if (std::getenv("FUZZ_VERBOSE"))
      std::fprintf(stderr, "same graph as OpenFst: %d states, %d arcs\n", g.num_states, g.num_arcs);
  }
  kio_fst_free(&g);
  return 0;
}
