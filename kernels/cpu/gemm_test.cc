// The fast GEMM against the scalar canonical MatMul (kernels/ops/dense.h):
// identical bits for every ISA this machine has, 1, 2, 3 and 8 threads, two
// repetitions, random and small-integer inputs, odd shapes and every
// transpose combination of the three dense products.
#include "kernels/cpu/gemm.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/dense.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;
using ::lockstep::testing::FloatBits;
using ::lockstep::testing::HexFloat;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;

// Identical bit patterns; on failure names the first differing index (hex).
::testing::AssertionResult SameBits(const std::vector<float>& got,
                                    const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ";
  }
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (FloatBits(got[i]) != FloatBits(want[i]) && diffs++ == 0) first = i;
  }
  if (diffs == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << absl::StrFormat(
             "%d of %d differ; first at index 0x%x: got %s, want %s", diffs,
             got.size(), first, HexFloat(got[first]), HexFloat(want[first]));
}

struct Dims {
  int64_t m, k, n;
};

// M, N not multiples of any vector width; K (and the other reduction
// lengths M and N of the gradients) = 1, 255, 256, 257, 600, 1100.
const Dims kShapes[] = {
    {1, 1, 1},
    {3, 255, 5},
    {7, 256, 9},
    {13, 257, 31},
    {33, 600, 17},
    {2, 1100, 3},
    {257, 9, 35},
    {6, 11, 600},
    {600, 4, 13},
    {255, 2, 40},
    {1, 40, 256},
    {70, 300, 45},  // the last one large enough for threads
    // Several row blocks x several column panel blocks x several k blocks.
    {200, 520, 150},
    // Few column panels over a long reduction, and a B reused by several
    // row super-blocks: operands packed in ranges of k on every thread.
    {600, 900, 5},
    // Exactly one vector of columns: 12 x 8 (AVX2, and AVX-512 for 8 or
    // fewer columns) and 12 x 16 (AVX-512) tiles, full panels.
    {29, 300, 8},
    {37, 700, 16},
};

enum class Product { kForward, kGradInput, kGradWeight };

c::MatMulShape ShapeOf(Product p, const c::DenseShape& d) {
  switch (p) {
    case Product::kForward:
      return c::DenseForwardShape(d);
    case Product::kGradInput:
      return c::DenseGradInputShape(d);
    case Product::kGradWeight:
      return c::DenseGradWeightShape(d);
  }
  return {};
}

// Element counts of the two operands and the output of a product.
void Sizes(Product p, const c::DenseShape& d, int64_t* a, int64_t* b,
           int64_t* out) {
  switch (p) {
    case Product::kForward:  // x, w -> y
      *a = d.m * d.k, *b = d.k * d.n, *out = d.m * d.n;
      return;
    case Product::kGradInput:  // dy, w -> dx
      *a = d.m * d.n, *b = d.k * d.n, *out = d.m * d.k;
      return;
    case Product::kGradWeight:  // x, dy -> dw
      *a = d.m * d.k, *b = d.m * d.n, *out = d.k * d.n;
      return;
  }
}

class GemmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (int t : {1, 2, 3, 8}) pools_.emplace_back(new ThreadPool(t));
  }
  static void TearDownTestSuite() { pools_.clear(); }
  static std::vector<std::unique_ptr<ThreadPool>> pools_;
};
std::vector<std::unique_ptr<ThreadPool>> GemmTest::pools_;

TEST_F(GemmTest, CanonicalMatchesScalarBitForBit) {
  const std::vector<CpuIsa> isas = SupportedCpuIsas();
  uint32_t seed = 1;
  for (const Dims& dims : kShapes) {
    for (int tr = 0; tr < 4; ++tr) {
      c::DenseShape d{dims.m, dims.k, dims.n, (tr & 1) != 0, (tr & 2) != 0};
      for (Product p :
           {Product::kForward, Product::kGradInput, Product::kGradWeight}) {
        for (bool ints : {false, true}) {
          int64_t na = 0, nb = 0, nc = 0;
          Sizes(p, d, &na, &nb, &nc);
          ++seed;
          const std::vector<float> a =
              ints ? SmallInts(na, seed) : RandomFloats(na, seed);
          const std::vector<float> b =
              ints ? SmallInts(nb, seed + 7919) : RandomFloats(nb, seed + 7919);
          const c::MatMulShape s = ShapeOf(p, d);
          std::vector<float> want(nc, -1.0f);
          c::MatMul(s, a.data(), b.data(), want.data());
          for (CpuIsa isa : isas) {
            for (const auto& pool : pools_) {
              for (int rep = 0; rep < 2; ++rep) {
                std::vector<float> got(nc, -2.0f);
                CanonicalGemm(s, a.data(), b.data(), got.data(), isa,
                              pool.get());
                ASSERT_TRUE(SameBits(got, want)) << absl::StrFormat(
                    "m=%d k=%d n=%d tx=%d tw=%d product=%d ints=%d isa=%s "
                    "threads=%d rep=%d",
                    d.m, d.k, d.n, d.transpose_x, d.transpose_w,
                    static_cast<int>(p), ints, CpuIsaName(isa),
                    pool->num_threads(), rep);
              }
            }
          }
        }
      }
    }
  }
}

// One chain per output over all of K (the DETERMINISTIC order).
float SingleChain(const float* a, int64_t sa, const float* b, int64_t sb,
                  int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc = c::LsFma(a[i * sa], b[i * sb], acc);
  return acc;
}

TEST_F(GemmTest, SingleChainIsOneFmaChainOnEveryIsaAndThreadCount) {
  for (const Dims& dims : {Dims{9, 600, 21}, Dims{17, 1100, 5}}) {
    c::DenseShape d{dims.m, dims.k, dims.n, false, true};
    const c::MatMulShape s = c::DenseForwardShape(d);
    const std::vector<float> a = RandomFloats(d.m * d.k, 3);
    const std::vector<float> b = RandomFloats(d.k * d.n, 4);
    std::vector<float> want(d.m * d.n);
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        want[i * d.n + j] = SingleChain(a.data() + i * s.a_row, s.a_depth,
                                        b.data() + j * s.b_col, s.b_depth, d.k);
      }
    }
    for (CpuIsa isa : SupportedCpuIsas()) {
      for (const auto& pool : pools_) {
        std::vector<float> got(d.m * d.n);
        Gemm(s, a.data(), b.data(), got.data(), kSingleChain, isa, pool.get());
        ASSERT_TRUE(SameBits(got, want))
            << CpuIsaName(isa) << " threads " << pool->num_threads();
      }
    }
  }
}

// C larger than one super-block of the driver (more than 64 row tiles or
// 16 column panels of the ISA's micro-kernel), with one slab of two k
// blocks or two slabs (more than 1024 terms), both orientations of C, and
// operands fed by packers one k block at a time: the CANONICAL tree and the
// single chain keep their bits across super-blocks and k blocks.
struct RowMajorOperands {
  const float* a;  // m x k
  const float* b;  // k x n
  int64_t k, n;
  static void PackA(const void* ctx, int64_t first, int count, int width,
                    int64_t p_begin, int64_t p_count, float* dst) {
    const auto& f = *static_cast<const RowMajorOperands*>(ctx);
    for (int64_t p = 0; p < p_count; ++p) {
      for (int v = 0; v < width; ++v) {
        dst[p * width + v] =
            v < count ? f.a[(first + v) * f.k + p_begin + p] : 0.0f;
      }
    }
  }
  static void PackB(const void* ctx, int64_t first, int count, int width,
                    int64_t p_begin, int64_t p_count, float* dst) {
    const auto& f = *static_cast<const RowMajorOperands*>(ctx);
    for (int64_t p = 0; p < p_count; ++p) {
      for (int v = 0; v < width; ++v) {
        dst[p * width + v] =
            v < count ? f.b[(p_begin + p) * f.n + first + v] : 0.0f;
      }
    }
  }
};

TEST_F(GemmTest, SuperBlocksAndPackedKBlocksKeepTheBits) {
  for (CpuIsa isa : SupportedCpuIsas()) {
    // The micro-kernel tile of each ISA (gemm_scalar.cc, gemm_avx2.cc,
    // gemm_avx512.cc): MR rows x NR columns. AVX-512 runs 780 rows (65
    // tiles of 12) on 12 x 32 tiles, and 256 rows (which 12-row tiles would
    // pad by 8) on 8 x 32 ones: several column super-blocks, and several
    // row super-blocks of 12-row tiles (the padding rule picks 8-row tiles
    // only for products too short to form two; conv_gemm_test runs indirect
    // products over several of them); 5 rows on 8 x 48 tiles, 17 panels.
    const int64_t nr = isa == CpuIsa::kAvx512 ? 32 : 16;
    const int64_t big_n = 16 * nr + nr + 3;
    std::vector<Dims> shapes;
    if (isa == CpuIsa::kAvx512) {
      shapes = {Dims{780, 300, big_n}, Dims{256, 300, big_n},
                Dims{780, 1100, 20}, Dims{256, 1100, 20},
                Dims{5, 1100, 16 * 48 + 51}};
    } else {
      const int64_t mr = isa == CpuIsa::kAvx2 ? 6 : 4;
      const int64_t big_m = 64 * mr + mr + 1;
      shapes = {Dims{big_m, 300, big_n}, Dims{big_m, 1100, 20},
                Dims{5, 1100, big_n}};
    }
    for (const Dims& dims : shapes) {
      const int64_t m = dims.m, k = dims.k, n = dims.n;
      const std::vector<float> a = RandomFloats(m * k, 11);
      const std::vector<float> b = RandomFloats(k * n, 12);
      const RowMajorOperands operands{a.data(), b.data(), k, n};
      for (bool transposed_c : {false, true}) {
        c::MatMulShape s;
        s.rows = m, s.cols = n, s.depth = k;
        s.a_row = k, s.a_depth = 1, s.b_depth = n, s.b_col = 1;
        s.c_row = transposed_c ? 1 : n;
        s.c_col = transposed_c ? m : 1;
        std::vector<float> want(m * n), want_chain(m * n);
        c::MatMul(s, a.data(), b.data(), want.data());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            want_chain[i * s.c_row + j * s.c_col] =
                SingleChain(a.data() + i * k, 1, b.data() + j, n, k);
          }
        }
        for (int pool_index : {0, 2}) {  // 1 and 3 threads
          ThreadPool* pool = pools_[pool_index].get();
          // none, A, A and B, B packed whole
          for (int packers = 0; packers < 4; ++packers) {
            GemmPacking packing;
            packing.ctx = &operands;
            if (packers == 1 || packers == 2) {
              packing.pack_a = &RowMajorOperands::PackA;
            }
            if (packers >= 2) packing.pack_b = &RowMajorOperands::PackB;
            packing.pack_b_whole = packers == 3;
            for (int64_t chunk : {c::kChunk, kSingleChain}) {
              std::vector<float> got(m * n, -1.0f);
              GemmPacked(s, a.data(), b.data(), got.data(), chunk, packing, isa,
                         pool);
              ASSERT_TRUE(SameBits(got, chunk == c::kChunk ? want : want_chain))
                  << CpuIsaName(isa) << " m " << m << " k " << k << " n " << n
                  << " threads " << pool->num_threads() << " transposed_c "
                  << transposed_c << " packers " << packers
                  << (chunk == c::kChunk ? " canonical" : " single chain");
            }
          }
        }
      }
    }
  }
}

// B packed once by PackGemmB (from the strided B or from a packer) and
// shared: the products read it, not their own B (given here as another
// matrix), and give the bits of the product with the packed B, in every
// mode, on 1 and 3 threads, on one slab and several, one row super-block
// and several, and with a B over 4 MiB, which one thread reads in blocks of
// 32 row tiles (136 rows: 17 tiles of 8 or more of fewer rows). A packing
// made for other columns is not used.
TEST_F(GemmTest, SharedPackedBIsReadInsteadOfB) {
  for (CpuIsa isa : SupportedCpuIsas()) {
    const int64_t nr = isa == CpuIsa::kAvx512 ? 32 : 16;
    const int64_t big_n = 16 * nr + nr + 3;
    for (const Dims& dims :
         {Dims{256, 300, big_n}, Dims{780, 1100, 20},
          Dims{5, 1100, 16 * 48 + 51}, Dims{40, 7, 3}, Dims{136, 1100, 1000}}) {
      const int64_t m = dims.m, k = dims.k, n = dims.n;
      const std::vector<float> a = RandomFloats(m * k, 21);
      const std::vector<float> b = RandomFloats(k * n, 22);
      const std::vector<float> other = RandomFloats(k * n, 23);
      const RowMajorOperands operands{a.data(), b.data(), k, n};
      c::MatMulShape s;
      s.rows = m, s.cols = n, s.depth = k;
      s.a_row = k, s.a_depth = 1, s.b_depth = n, s.b_col = 1;
      s.c_row = n, s.c_col = 1;
      std::vector<float> want(m * n), want_chain(m * n);
      c::MatMul(s, a.data(), b.data(), want.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          want_chain[i * n + j] =
              SingleChain(a.data() + i * k, 1, b.data() + j, n, k);
        }
      }
      for (int pool_index : {0, 2}) {  // 1 and 3 threads
        ThreadPool* pool = pools_[pool_index].get();
        for (bool from_packer : {false, true}) {
          GemmPacking pack;
          pack.ctx = &operands;
          if (from_packer) pack.pack_b = &RowMajorOperands::PackB;
          PackedGemmB packed;
          PackGemmB(s, b.data(), pack, isa, pool, &packed);
          ASSERT_TRUE(packed.Fits(n, k, packed.panel_width));
          for (int64_t chunk : {c::kChunk, kSingleChain}) {
            GemmPacking use;
            use.b_packed = &packed;
            std::vector<float> got(m * n, -1.0f);
            GemmPacked(s, a.data(), other.data(), got.data(), chunk, use, isa,
                       pool);
            ASSERT_TRUE(SameBits(got, chunk == c::kChunk ? want : want_chain))
                << CpuIsaName(isa) << " m " << m << " k " << k << " n " << n
                << " threads " << pool->num_threads() << " from_packer "
                << from_packer
                << (chunk == c::kChunk ? " canonical" : " single chain");
          }
        }
        // Packed for one column fewer: the product packs its own B.
        c::MatMulShape narrow = s;
        narrow.cols = n - 1;
        PackedGemmB packed;
        PackGemmB(narrow, other.data(), GemmPacking(), isa, pool, &packed);
        GemmPacking use;
        use.b_packed = &packed;
        std::vector<float> got(m * n, -1.0f);
        GemmPacked(s, a.data(), b.data(), got.data(), c::kChunk, use, isa,
                   pool);
        ASSERT_TRUE(SameBits(got, want)) << CpuIsaName(isa) << " m " << m;
      }
    }
  }
}

TEST(IsaTest, NamesParseAndScalarIsAlwaysSupported) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    EXPECT_EQ(ParseCpuIsa(CpuIsaName(isa)), isa);
  }
  EXPECT_FALSE(ParseCpuIsa("sse9").has_value());
  EXPECT_TRUE(CpuIsaSupported(CpuIsa::kScalar));
  EXPECT_EQ(SupportedCpuIsas().front(), CpuIsa::kScalar);
  EXPECT_EQ(SupportedCpuIsas().back(), BestCpuIsa());
  SetCpuIsaForTesting(CpuIsa::kScalar);
  EXPECT_EQ(ActiveCpuIsa(), CpuIsa::kScalar);
  SetCpuIsaForTesting(std::nullopt);
}

TEST(ThreadPoolTest, RunsEveryTaskOnceAndNests) {
  ThreadPool pool(3);
  for (int round = 0; round < 50; ++round) {
    std::vector<int> hits(37, 0);
    pool.ParallelFor(37, [&](int64_t i) {
      ++hits[i];
      // A nested call runs inline rather than deadlocking.
      pool.ParallelFor(2, [](int64_t) {});
    });
    for (int h : hits) ASSERT_EQ(h, 1);
  }
}

// Workers spin kPoolSpinMicros before sleeping unless
// LOCKSTEP_CPU_SPIN_MICROS says otherwise (invalid values are ignored); an
// explicit value is kept. Jobs after a sleep still run every task (the
// workers wake).
TEST(ThreadPoolTest, SpinsAsConfigured) {
  unsetenv("LOCKSTEP_CPU_SPIN_MICROS");
  EXPECT_EQ(ThreadPool(2).spin_micros(), kPoolSpinMicros);
  setenv("LOCKSTEP_CPU_SPIN_MICROS", "50", 1);
  EXPECT_EQ(ThreadPool(2).spin_micros(), 50);
  for (const char* bad : {"-1", "100001", "2ms", ""}) {
    setenv("LOCKSTEP_CPU_SPIN_MICROS", bad, 1);
    EXPECT_EQ(ThreadPool(2).spin_micros(), kPoolSpinMicros) << bad;
  }
  unsetenv("LOCKSTEP_CPU_SPIN_MICROS");
  EXPECT_EQ(ThreadPool(2, 7).spin_micros(), 7);
  // No spin; a spin that yields past its first 50 us, the gaps ending
  // before, while and after it yields.
  for (const int64_t spin : {int64_t{0}, int64_t{400}}) {
    ThreadPool pool(3, spin);
    for (const int gap_us : {0, 20, 200, 2000}) {
      for (int round = 0; round < 5; ++round) {
        std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
        std::vector<int> hits(7, 0);
        pool.ParallelFor(7, [&](int64_t i) { ++hits[i]; });
        for (int h : hits) ASSERT_EQ(h, 1) << spin << " " << gap_us;
      }
    }
  }
}

}  // namespace
}  // namespace lockstep::kernels
