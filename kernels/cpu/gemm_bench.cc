// Canonical GEMM throughput (GFLOP/s, 2 M N K flops per call):
//   bazel run -c opt //kernels/cpu:gemm_bench
// Square sizes 256..2048 on 1 and 2 threads for each ISA this CPU has, the
// best of several runs; and OpenBLAS sgemm beside it when Debian's OpenBLAS
// is installed (it is looked up with dlopen, so nothing links against it).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/dense.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int,
                         const float*, int, float, float*, int);
using SetThreadsFn = void (*)(int);

double Seconds(const std::function<void()>& fn, double budget) {
  double best = 1e30;
  double spent = 0;
  for (int r = 0; r < 20 && (r < 2 || spent < budget); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    best = std::min(best, s);
    spent += s;
  }
  return best;
}

int Main() {
  SgemmFn sgemm = nullptr;
  SetThreadsFn set_threads = nullptr;
  for (const char* lib : {"libopenblas.so.0", "libopenblas.so"}) {
    if (void* h = dlopen(lib, RTLD_NOW)) {
      sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
      set_threads =
          reinterpret_cast<SetThreadsFn>(dlsym(h, "openblas_set_num_threads"));
      break;
    }
  }
  std::printf(
      "canonical GEMM (C = A B, row-major, every output = canonical "
      "chunked fma chain); best-of runs, GFLOP/s\n");
  if (sgemm == nullptr) {
    std::printf("OpenBLAS: not installed (apt-get install libopenblas-dev)\n");
  }
  std::printf("%-7s %6s %8s %12s %12s %7s\n", "isa", "size", "threads",
              "canonical", "openblas", "ratio");
  for (CpuIsa isa : SupportedCpuIsas()) {
    for (int64_t n : {256, 512, 1024, 2048}) {
      if (isa == CpuIsa::kScalar && n > 512) continue;  // minutes, not useful
      std::vector<float> a(n * n), b(n * n), out(n * n);
      for (int64_t i = 0; i < n * n; ++i) {
        a[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
        b[i] = static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f;
      }
      c::DenseShape d{n, n, n, false, false};
      const c::MatMulShape s = c::DenseForwardShape(d);
      const double flops = 2.0 * n * n * n;
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        const double t = Seconds(
            [&] {
              CanonicalGemm(s, a.data(), b.data(), out.data(), isa, &pool);
            },
            1.0);
        const double gf = flops / t * 1e-9;
        if (sgemm != nullptr) {
          if (set_threads != nullptr) set_threads(threads);
          const double tb = Seconds(
              [&] {
                sgemm(101, 111, 111, n, n, n, 1.0f, a.data(), n, b.data(), n,
                      0.0f, out.data(), n);
              },
              1.0);
          const double gb = flops / tb * 1e-9;
          std::printf("%-7s %6ld %8d %12.1f %12.1f %7.2f\n",
                      CpuIsaName(isa).data(), static_cast<long>(n), threads, gf,
                      gb, gf / gb);
        } else {
          std::printf("%-7s %6ld %8d %12.1f %12s %7s\n", CpuIsaName(isa).data(),
                      static_cast<long>(n), threads, gf, "-", "-");
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace lockstep::kernels

int main() { return lockstep::kernels::Main(); }
