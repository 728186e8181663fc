// Measures CanonicalExp/Log/Tanh against a float64 reference.
//
// For every float x in the sweep range (or every `stride`-th bit pattern),
// compares f(x) with ref(x) = std::exp/log/tanh((double)x) and reports
//   max_ulp     max |f(x) - ref(x)| / ulp(float(ref(x))), where ulp(v) is the
//               spacing of floats in v's binade (2^-149 for subnormals);
//   worst_x     the input where max_ulp occurs;
//   not_cr      how many results differ from float(ref(x)) (not correctly
//               rounded, up to the reference's own double rounding);
//   max_bits    the largest distance in representable floats to float(ref).
// Ranges: exp over [-104, 89], log over all positive finite floats
// (subnormals included), tanh over all finite floats.
//
// Usage: portable_math_ulp [--stride=N] [--func=exp|log|tanh] [--threads=N]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/canonical/float_bits.h"
#include "kernels/math/portable_math.h"

namespace lockstep::canonical {
namespace {

struct Stats {
  double max_ulp = 0.0;
  float worst_x = 0.0f;
  float worst_y = 0.0f;
  double worst_ref = 0.0;
  uint64_t not_cr = 0;
  uint64_t count = 0;
  int64_t max_bits = 0;

  void Merge(const Stats& o) {
    if (o.max_ulp > max_ulp) {
      max_ulp = o.max_ulp;
      worst_x = o.worst_x;
      worst_y = o.worst_y;
      worst_ref = o.worst_ref;
    }
    not_cr += o.not_cr;
    count += o.count;
    if (o.max_bits > max_bits) max_bits = o.max_bits;
  }
};

// Spacing of floats in the binade of v (finite float).
double UlpOf(float v) {
  const float a = std::fabs(v);
  if (a < 0x1.0p-126f) return 0x1.0p-149;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1).
  return std::ldexp(1.0, e - 24);
}

// Bit pattern mapped to a monotonic integer line (for float distances).
int64_t Ordered(float v) {
  const uint32_t b = LsFloatToBits(v);
  return (b & 0x80000000u) ? -static_cast<int64_t>(b & 0x7FFFFFFFu)
                           : static_cast<int64_t>(b);
}

enum class Func { kExp, kLog, kTanh };

// Points split by whether the float reference is subnormal
// (0 < |float(ref)| < 2^-126), so both ranges can be read separately.
struct Both {
  Stats normal;
  Stats sub;
  void Merge(const Both& o) {
    normal.Merge(o.normal);
    sub.Merge(o.sub);
  }
};

void Check(Func f, float x, Stats* s) {
  float y;
  double ref;
  switch (f) {
    case Func::kExp:
      y = CanonicalExp(x);
      ref = std::exp(static_cast<double>(x));
      break;
    case Func::kLog:
      y = CanonicalLog(x);
      ref = std::log(static_cast<double>(x));
      break;
    default:
      y = CanonicalTanh(x);
      ref = std::tanh(static_cast<double>(x));
      break;
  }
  const float rf = static_cast<float>(ref);
  ++s->count;
  if (LsFloatToBits(y) == LsFloatToBits(rf)) return;
  ++s->not_cr;
  double err;
  if (std::isinf(rf) || std::isinf(y) || std::isnan(y)) {
    err = HUGE_VAL;
  } else {
    err = std::fabs(static_cast<double>(y) - ref) / UlpOf(rf);
    const int64_t d = Ordered(y) - Ordered(rf);
    const int64_t ad = d < 0 ? -d : d;
    if (ad > s->max_bits) s->max_bits = ad;
  }
  if (err > s->max_ulp) {
    s->max_ulp = err;
    s->worst_x = x;
    s->worst_y = y;
    s->worst_ref = ref;
  }
}

bool SubnormalReference(Func f, float x) {
  double ref;
  switch (f) {
    case Func::kExp:
      ref = std::exp(static_cast<double>(x));
      break;
    case Func::kLog:
      return false;
    default:
      ref = std::tanh(static_cast<double>(x));
      break;
  }
  const float rf = static_cast<float>(ref);
  return rf != 0.0f && std::fabs(rf) < 0x1.0p-126f;
}

// Sweeps bit patterns [lo, hi] (inclusive) with `stride` over `threads`
// threads, each thread taking an interleaved share of the strided points.
Both Sweep(Func f, uint32_t lo, uint32_t hi, uint32_t stride, int threads) {
  std::vector<Both> part(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([=, &part] {
      Both s;
      const uint64_t step = static_cast<uint64_t>(stride) * threads;
      for (uint64_t b = lo + static_cast<uint64_t>(stride) * t; b <= hi;
           b += step) {
        const float x = LsBitsToFloat(static_cast<uint32_t>(b));
        Check(f, x, SubnormalReference(f, x) ? &s.sub : &s.normal);
      }
      part[t] = s;
    });
  }
  for (std::thread& th : pool) th.join();
  Both total;
  for (const Both& s : part) total.Merge(s);
  return total;
}

void Report(const char* name, const Stats& s) {
  std::printf(
      "%-5s points=%llu max_ulp=%.4f at x=%a (%.9g) got=%a ref=%a "
      "not_correctly_rounded=%llu (%.4f%%) max_float_distance=%lld\n",
      name, static_cast<unsigned long long>(s.count), s.max_ulp, s.worst_x,
      s.worst_x, s.worst_y, s.worst_ref,
      static_cast<unsigned long long>(s.not_cr),
      s.count ? 100.0 * s.not_cr / s.count : 0.0,
      static_cast<long long>(s.max_bits));
  std::fflush(stdout);
}

void Report(const char* name, const Both& b) {
  Stats all = b.normal;
  all.Merge(b.sub);
  Report(name, all);
  if (b.sub.count > 0) {
    Report((std::string(name) + " (normal or zero results)").c_str(), b.normal);
    Report((std::string(name) + " (subnormal results)").c_str(), b.sub);
  }
}

int Main(int argc, char** argv) {
  uint32_t stride = 1;
  int threads = 2;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--stride=", 0) == 0) {
      stride = static_cast<uint32_t>(std::strtoul(a.c_str() + 9, nullptr, 10));
    } else if (a.rfind("--func=", 0) == 0) {
      only = a.substr(7);
    } else if (a.rfind("--threads=", 0) == 0) {
      threads = std::atoi(a.c_str() + 10);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--stride=N] [--func=exp|log|tanh] "
                   "[--threads=N]\n",
                   argv[0]);
      return 2;
    }
  }
  if (stride == 0 || threads < 1) {
    std::fprintf(stderr, "stride and threads must be >= 1\n");
    return 2;
  }
  std::printf("stride=%u threads=%d reference=float64 std::exp/log/tanh\n",
              stride, threads);
  const uint32_t kPlus89 = LsFloatToBits(89.0f);
  const uint32_t kMinus104 = LsFloatToBits(-104.0f);
  const uint32_t kMaxFinite = 0x7F7FFFFFu;
  if (only.empty() || only == "exp") {
    Both s = Sweep(Func::kExp, 0u, kPlus89, stride, threads);
    s.Merge(Sweep(Func::kExp, 0x80000000u, kMinus104, stride, threads));
    Report("exp", s);
  }
  if (only.empty() || only == "log") {
    Report("log", Sweep(Func::kLog, 1u, kMaxFinite, stride, threads));
  }
  if (only.empty() || only == "tanh") {
    Both s = Sweep(Func::kTanh, 0u, kMaxFinite, stride, threads);
    s.Merge(Sweep(Func::kTanh, 0x80000000u, 0x80000000u | kMaxFinite, stride,
                  threads));
    Report("tanh", s);
  }
  return 0;
}

}  // namespace
}  // namespace lockstep::canonical

int main(int argc, char** argv) {
  return lockstep::canonical::Main(argc, argv);
}
