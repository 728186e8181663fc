// Fingerprint throughput beside single-core read bandwidth.
//
//   bazel run -c opt //kernels/hash:fingerprint_bench -- [rounds] [threads]
//
// For a 64 KiB tensor (one leaf; repeated, so it is served from cache), for
// 256 consecutive 1 MiB tensors (256 MiB in all, served from DRAM) and for one
// 256 MiB tensor (DRAM) it measures, in one process:
//   read             AVX2 load-and-add loops over the same buffer, with
//                    ordinary and with non-temporal loads: the single-core
//                    read bandwidth references ("/read", "/read-nt")
//   xxh3 lib / dispatch / ...  raw XXH3-64 over 64 KiB leaves (information)
//   hash <isa>       HashTensorBytes, forced to that instruction set
//   hash+stats <isa> FingerprintAndStats
//   stats <isa>      ComputeStats alone
//   hash+stats, N threads   FingerprintAndStats on the selected path with
//                    the leaves spread over a pool of N threads (the CPU
//                    kernels' pool, as the worker lends it; DRAM cases)
// Every row is measured once per round, rounds interleaved so that load from
// other processes spreads over all rows; the table shows the best and the
// median round and the best figure's ratios to the best round of each read
// loop. A closing summary gives, for the DRAM cases, hash+stats on the
// automatically selected path against the single-core read bandwidth, the
// faster of the two read loops (the target is >= 0.85; on an AMD Zen 4
// host the non-temporal loop read DRAM 1.3 - 1.5 x faster than the
// ordinary one), and the N-thread figure beside it. Between the cache and
// DRAM cases, the time per call on small tensors (64, 1024 and 4096
// elements), where fixed costs count, and hash + statistics of tensors of
// 2 to 32 leaves (in cache) on 1 and on N threads, which is what
// kMinLeavesPerThread is chosen from. N is 2, or the third argument.
// Figures are only printed, never asserted.
#include <xxhash.h>

#if defined(__x86_64__)
#define XXH_DISPATCH_DISABLE_REPLACE 1
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/hash/read_bandwidth.h"

namespace lockstep::hash {
namespace {

volatile uint64_t g_sink = 0;

struct Row {
  std::string name;
  std::function<void()> run;  // processes `bytes` bytes once
  std::vector<double> gbps;
};

// Runs `fn` until at least min_seconds have passed (and at least twice);
// returns GB/s (1e9 bytes per second).
double Measure(const std::function<void()>& fn, size_t bytes,
               double min_seconds) {
  fn();  // warm-up: page faults, caches, lazy dispatch
  const auto start = std::chrono::steady_clock::now();
  int calls = 0;
  double elapsed = 0.0;
  do {
    fn();
    ++calls;
    elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  } while (elapsed < min_seconds || calls < 2);
  return static_cast<double>(bytes) * calls / elapsed / 1e9;
}

void Sink(uint64_t v) { g_sink = g_sink + v; }

// What the summary needs from one BenchSize call.
struct SizeResult {
  std::string label;
  double read_gbps = 0;        // the faster read loop
  double read_ld_gbps = 0;     // ordinary loads
  double read_nt_gbps = 0;     // non-temporal loads
  double hash_stats_gbps = 0;  // on the automatically selected path
  double parallel_gbps = 0;    // the same on the pool's threads
};

// `pool` as the fingerprint functions' Parallelism.
Parallelism PoolParallelism(kernels::ThreadPool* pool, int64_t min_leaves) {
  Parallelism p;
  p.threads = pool->num_threads();
  p.min_leaves_per_thread = min_leaves;
  p.run = [pool](int64_t n, absl::FunctionRef<void(int64_t)> task) {
    pool->ParallelFor(n, [task](int64_t i) { task(i); });
  };
  return p;
}

// Fingerprints data[0 .. bytes) as consecutive float32 tensors of
// tensor_bytes each (tensor_bytes divides bytes).
// With `parallel`, also the selected path on its threads.
SizeResult BenchSize(const char* label, const float* data, size_t bytes,
                     size_t tensor_bytes, int rounds, double min_seconds,
                     const Parallelism* parallel = nullptr) {
  const size_t n = tensor_bytes / sizeof(float);
  const size_t tensors = bytes / tensor_bytes;
  const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
  std::vector<Row> rows;
  const bool have_read = IsaAvailable(HashIsa::kAvx2);
  if (have_read) {
    rows.push_back({"read (avx2 load loop)",
                    [=] { Sink(bench::ReadSum(data, bytes)); },
                    {}});
    rows.push_back({"read (avx2 non-temporal load loop)",
                    [=] { Sink(bench::ReadSumNonTemporal(data, bytes)); },
                    {}});
  }
  auto leaves = [=](uint64_t (*h)(const void*, size_t)) {
    return [=] {
      const auto* p = reinterpret_cast<const uint8_t*>(data);
      uint64_t acc = 0;
      for (size_t off = 0; off < bytes; off += kLeafBytes) {
        acc ^= h(p + off, std::min(kLeafBytes, bytes - off));
      }
      Sink(acc);
    };
  };
  rows.push_back({"xxh3-64 leaves, libxxhash XXH3_64bits",
                  leaves([](const void* p, size_t l) -> uint64_t {
                    return XXH3_64bits(p, l);
                  }),
                  {}});
#if defined(__x86_64__)
  rows.push_back({"xxh3-64 leaves, libxxhash XXH3_64bits_dispatch",
                  leaves([](const void* p, size_t l) -> uint64_t {
                    const uint64_t h = XXH3_64bits_dispatch(p, l);
                    // Dispatch leaves the upper register halves dirty,
                    // which would slow every later SSE row (read_bandwidth.h).
                    if (IsaAvailable(HashIsa::kAvx2)) bench::ZeroUpperState();
                    return h;
                  }),
                  {}});
#endif
  const HashIsa selected = SelectedIsa();
  size_t selected_row = 0;
  for (HashIsa isa : {HashIsa::kBaseline, HashIsa::kAvx2, HashIsa::kAvx512,
                      HashIsa::kAvx512Stream}) {
    if (!IsaAvailable(isa)) continue;
    const std::string isa_name = IsaName(isa);
    rows.push_back({"hash " + isa_name,
                    [=] {
                      uint64_t acc = 0;
                      for (size_t t = 0; t < tensors; ++t) {
                        acc ^= HashTensorBytes(DtypeCode::kFloat32, shape,
                                               data + t * n, tensor_bytes, isa)
                                   ->lo;
                      }
                      Sink(acc);
                    },
                    {}});
    if (isa == selected) selected_row = rows.size();
    rows.push_back({"hash+stats " + isa_name,
                    [=] {
                      uint64_t acc = 0;
                      for (size_t t = 0; t < tensors; ++t) {
                        acc ^=
                            FingerprintAndStats(DtypeCode::kFloat32, shape,
                                                data + t * n, tensor_bytes, isa)
                                ->fingerprint.lo;
                      }
                      Sink(acc);
                    },
                    {}});
    rows.push_back({"stats " + isa_name,
                    [=] {
                      double acc = 0;
                      for (size_t t = 0; t < tensors; ++t) {
                        acc += ComputeStats(data + t * n, n, isa)->sum;
                      }
                      Sink(static_cast<uint64_t>(acc));
                    },
                    {}});
  }
  size_t parallel_row = 0;
  if (parallel != nullptr) {
    parallel_row = rows.size();
    rows.push_back({absl::StrFormat("hash+stats %s, %d threads",
                                    IsaName(selected), parallel->threads),
                    [=] {
                      uint64_t acc = 0;
                      for (size_t t = 0; t < tensors; ++t) {
                        acc ^= FingerprintAndStats(DtypeCode::kFloat32, shape,
                                                   data + t * n, tensor_bytes,
                                                   HashIsa::kAuto, parallel)
                                   ->fingerprint.lo;
                      }
                      Sink(acc);
                    },
                    {}});
  }
  for (int r = 0; r < rounds; ++r) {
    for (Row& row : rows) {
      row.gbps.push_back(Measure(row.run, bytes, min_seconds));
    }
  }
  for (Row& row : rows) std::sort(row.gbps.begin(), row.gbps.end());
  // Reference bandwidths: best round of each read loop.
  const double read_ld = have_read ? rows[0].gbps.back() : 0.0;
  const double read_nt = have_read ? rows[1].gbps.back() : 0.0;
  auto ratio = [](double x, double ref) {
    return ref > 0 ? absl::StrFormat("%.2f", x / ref) : std::string("n/a");
  };
  std::printf("\n%s: %zu bytes, %zu tensor(s) of %zu bytes, %d rounds\n", label,
              bytes, tensors, tensor_bytes, rounds);
  std::printf("  %-48s %9s %9s %8s %8s\n", "what", "best GB/s", "median",
              "/read", "/read-nt");
  for (const Row& row : rows) {
    const double best = row.gbps.back();
    const double median = row.gbps[row.gbps.size() / 2];
    std::printf("  %-48s %9.2f %9.2f %8s %8s\n", row.name.c_str(), best, median,
                ratio(best, read_ld).c_str(), ratio(best, read_nt).c_str());
  }
  SizeResult result;
  result.label = label;
  result.read_ld_gbps = read_ld;
  result.read_nt_gbps = read_nt;
  result.read_gbps = std::max(read_ld, read_nt);
  result.hash_stats_gbps = rows[selected_row].gbps.back();
  if (parallel != nullptr) {
    result.parallel_gbps = rows[parallel_row].gbps.back();
  }
  return result;
}

// Hash + statistics of one in-cache float32 tensor of `leaves` full leaves
// on the calling thread alone and spread over `pool` (one leaf per thread
// at least, so every size >= 2 leaves spreads): best of `rounds` GB/s each.
void BenchSpreadBySize(const float* data, kernels::ThreadPool* pool,
                       int rounds) {
  const Parallelism spread = PoolParallelism(pool, /*min_leaves=*/1);
  std::printf(
      "\nhash+stats (%s) of one float32 tensor in cache, alone and spread "
      "over %d threads: best of %d rounds, GB/s\n  %-8s %10s %10s %8s\n",
      IsaName(SelectedIsa()), pool->num_threads(), rounds, "leaves", "alone",
      "spread", "ratio");
  for (size_t leaves : {2, 4, 6, 8, 12, 16, 32}) {
    const size_t bytes = leaves * kLeafBytes;
    const std::vector<int64_t> shape = {static_cast<int64_t>(bytes / 4)};
    double best[2] = {0, 0};
    for (int r = 0; r < rounds; ++r) {
      for (int spread_it = 0; spread_it < 2; ++spread_it) {
        const Parallelism* p = spread_it ? &spread : nullptr;
        best[spread_it] = std::max(
            best[spread_it],
            Measure(
                [&] {
                  Sink(FingerprintAndStats(DtypeCode::kFloat32, shape, data,
                                           bytes, HashIsa::kAuto, p)
                           ->fingerprint.lo);
                },
                bytes, 0.02));
      }
    }
    std::printf("  %-8zu %10.2f %10.2f %8.2f\n", leaves, best[0], best[1],
                best[1] / best[0]);
  }
}

// Nanoseconds per call of FingerprintAndStats (with_stats) or
// HashTensorBytes on float32 tensors of n elements, consecutive in data (16
// of them, in cache), on the selected path: the fastest of 400 batches of
// about 50 us each. Short batches and the minimum keep the figure close to
// the unloaded cost on a shared machine.
double NsPerTensor(const float* data, size_t n, bool with_stats) {
  const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
  const size_t calls = std::max<size_t>(4, 50000 / (n / 16 + 50));
  double best = 1e30;
  uint64_t acc = 0;
  for (int batch = 0; batch < 400; ++batch) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < calls; ++i) {
      const float* x = data + (i % 16) * n;
      acc ^= with_stats
                 ? FingerprintAndStats(DtypeCode::kFloat32, shape, x, 4 * n)
                       ->fingerprint.lo
                 : HashTensorBytes(DtypeCode::kFloat32, shape, x, 4 * n)->lo;
    }
    const double ns = std::chrono::duration<double, std::nano>(
                          std::chrono::steady_clock::now() - start)
                          .count() /
                      static_cast<double>(calls);
    best = std::min(best, ns);
  }
  Sink(acc);
  return best;
}

int Main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const int threads = argc > 2 ? std::max(2, std::atoi(argv[2])) : 2;
  kernels::ThreadPool pool(threads);
  const Parallelism parallel = PoolParallelism(&pool, kMinLeavesPerThread);
  const size_t big = size_t{256} << 20;
  const size_t small = kLeafBytes;
  auto* data = static_cast<float*>(std::aligned_alloc(4096, big));
  if (data == nullptr) {
    std::fprintf(stderr, "cannot allocate %zu bytes\n", big);
    return 1;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < big / sizeof(float); ++i) data[i] = normal(rng);

  std::printf("fingerprint_bench: auto isa = %s, leaf = %zu bytes\n",
              IsaName(SelectedIsa()), kLeafBytes);
  BenchSize("64 KiB (cache)", data, small, small, rounds, 0.05);
  // Small tensors, where the fixed cost per tensor counts.
  std::printf(
      "\nsmall float32 tensors (cache), %s path: ns per tensor, fastest of "
      "400 batches\n  %-10s %10s %12s\n",
      IsaName(SelectedIsa()), "elements", "hash", "hash+stats");
  for (size_t n : {size_t{64}, size_t{1024}, size_t{4096}}) {
    const double hash_ns = NsPerTensor(data, n, /*with_stats=*/false);
    std::printf("  %-10zu %10.1f %12.1f\n", n, hash_ns,
                NsPerTensor(data, n, /*with_stats=*/true));
  }
  BenchSpreadBySize(data, &pool, rounds);
  std::vector<SizeResult> dram;
  dram.push_back(BenchSize("1 MiB tensors (DRAM)", data, big, size_t{1} << 20,
                           rounds, 0.3, &parallel));
  dram.push_back(
      BenchSize("256 MiB (DRAM)", data, big, big, rounds, 0.3, &parallel));
  std::printf(
      "\nsummary: hash+stats (%s) against the single-core read bandwidth "
      "(the faster of the ordinary and the non-temporal load loop), best "
      "rounds of this run (target >= 0.85); on %d threads\n",
      IsaName(SelectedIsa()), threads);
  for (const SizeResult& r : dram) {
    auto ratio = [&](double x) {
      return r.read_gbps > 0 ? absl::StrFormat("%.2f", x / r.read_gbps)
                             : std::string("n/a");
    };
    std::printf(
        "  %-24s hash+stats %6.2f GB/s  read %6.2f / %6.2f GB/s  ratio %s;  "
        "%d threads %6.2f GB/s (%s of the read)\n",
        r.label.c_str(), r.hash_stats_gbps, r.read_ld_gbps, r.read_nt_gbps,
        ratio(r.hash_stats_gbps).c_str(), threads, r.parallel_gbps,
        ratio(r.parallel_gbps).c_str());
  }
  std::free(data);
  return 0;
}

}  // namespace
}  // namespace lockstep::hash

int main(int argc, char** argv) { return lockstep::hash::Main(argc, argv); }
