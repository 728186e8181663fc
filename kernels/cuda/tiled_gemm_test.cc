// The tiled GEMM (tiled_gemm.h) on emulated blocks: bit for bit the
// one-thread-per-output body (BatchedMatMulThread) for every shape,
// transpose, chunk count, tile shape, grid and thread order, special values
// included; and through PlanCanonicalOp + RunEmulated, the CPU backend's
// bits for the dense.*, matmul.* and conv2d / conv_transpose2d calls the
// planner tiles (conv2d grad_weight's reduction split or not).
#include "kernels/cuda/tiled_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/plan.h"
#include "kernels/cuda/test_cases.h"
#include "kernels/cuda/thread_bodies.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace lockstep::kernels::cuda {
namespace {

using testing::CloneAll;
using testing::OpCase;
using testing::RunRegistered;
using testing::SameBits;

constexpr uint32_t kPoison = 0xA5A5A5A5u;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Uniform in [-1, 1) with sparse subnormals, -0 and +0; with `specials`
// also a few +Inf, -Inf and quiet NaNs with payloads.
std::vector<float> Values(int64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float x = real(rng);
    if (i % 89 == 3) x = (i % 2 ? -1.0f : 1.0f) * 1.5e-39f;
    if (i % 97 == 5) x = (i % 2 ? -0.0f : 0.0f);
    if (specials) {
      if (i % 1009 == 11) x = std::numeric_limits<float>::infinity();
      if (i % 1013 == 17) x = -std::numeric_limits<float>::infinity();
      if (i % 1019 == 23) x = FromBits(0x7fc01234u + (i & 0xff));
    }
    v[static_cast<size_t>(i)] = x;
  }
  return v;
}

// One product of the dense family: which of the three and its transposes.
enum class Product { kForward, kGradInput, kGradWeight };
const char* ProductName(Product p) {
  switch (p) {
    case Product::kForward:
      return "forward";
    case Product::kGradInput:
      return "grad_input";
    case Product::kGradWeight:
      return "grad_weight";
  }
  return "?";
}

struct Problem {
  std::string label;
  c::BatchedMatMulShape s;
  std::vector<float> a, b;
  int64_t out_size = 0;
};

// The dense product `p` of X [m, k] and W [k, n] (transposes as given), in
// `batch` entries with `scale`, the operands of every entry stored one
// after another.
Problem MakeProblem(int64_t m, int64_t k, int64_t n, bool tx, bool tw,
                    Product p, int64_t batch, float scale, bool specials,
                    uint32_t seed) {
  c::DenseShape d;
  d.m = m;
  d.k = k;
  d.n = n;
  d.transpose_x = tx;
  d.transpose_w = tw;
  Problem r;
  r.label = absl::StrFormat("%s m=%d k=%d n=%d tx=%d tw=%d batch=%d scale=%g",
                            ProductName(p), m, k, n, tx, tw, batch, scale);
  int64_t a_size = 0, b_size = 0;
  switch (p) {
    case Product::kForward:
      r.s.m = c::DenseForwardShape(d);
      a_size = m * k;
      b_size = k * n;
      break;
    case Product::kGradInput:
      r.s.m = c::DenseGradInputShape(d);
      a_size = m * n;
      b_size = k * n;
      break;
    case Product::kGradWeight:
      r.s.m = c::DenseGradWeightShape(d);
      a_size = m * k;
      b_size = m * n;
      break;
  }
  const int64_t c_size = r.s.m.rows * r.s.m.cols;
  r.s.batch = batch;
  r.s.a_batch = a_size;
  r.s.b_batch = b_size;
  r.s.c_batch = c_size;
  r.s.scale = scale;
  r.a = Values(batch * a_size, seed, specials);
  r.b = Values(batch * b_size, seed + 1, specials);
  r.out_size = batch * c_size;
  return r;
}

// The one-thread-per-output body, one thread for everything.
std::vector<uint32_t> OneThreadBits(const Problem& p) {
  std::vector<float> out(static_cast<size_t>(p.out_size), FromBits(kPoison));
  BatchedMatMulThread(p.s, p.a.data(), p.b.data(), out.data(), 0, 1);
  std::vector<uint32_t> bits(out.size());
  for (size_t i = 0; i < out.size(); ++i) bits[i] = Bits(out[i]);
  return bits;
}

// The tiled body on `blocks` emulated blocks of tile shape T, output and
// scratch filled with a pattern first.
template <class T>
std::vector<uint32_t> TiledBits(const Problem& p, int64_t blocks,
                                bool reverse_threads) {
  std::vector<float> out(static_cast<size_t>(p.out_size), FromBits(kPoison));
  std::vector<float> scratch(static_cast<size_t>(GemmTileScratchFloats<T>(p.s)),
                             FromBits(0x7fa00000u));
  EmulateTiledGemm<T>(p.s, p.a.data(), p.b.data(), out.data(),
                      scratch.empty() ? nullptr : scratch.data(), blocks,
                      reverse_threads);
  std::vector<uint32_t> bits(out.size());
  for (size_t i = 0; i < out.size(); ++i) bits[i] = Bits(out[i]);
  return bits;
}

::testing::AssertionResult SameWords(const std::vector<uint32_t>& got,
                                     const std::vector<uint32_t>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << got.size() << " outputs, want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure()
             << "output " << i << ": 0x" << std::hex << got[i] << ", want 0x"
             << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs the device tile at grids of 1 block, 3 blocks (fewer than the
// tiles of the larger shapes: grid-stride) and more blocks than tiles, the
// last with the threads of every phase in reverse order.
void ExpectDeviceTileBits(const Problem& p) {
  SCOPED_TRACE(p.label);
  const std::vector<uint32_t> want = OneThreadBits(p);
  const int64_t tiles = GemmTiles<DeviceGemmTile>(p.s);
  for (const int64_t blocks : {int64_t{1}, int64_t{3}}) {
    EXPECT_TRUE(SameWords(TiledBits<DeviceGemmTile>(p, blocks, false), want))
        << blocks << " blocks";
  }
  EXPECT_TRUE(SameWords(TiledBits<DeviceGemmTile>(p, tiles + 5, true), want))
      << "reversed threads";
}

struct Dims {
  int64_t m, k, n;
};

// Small and prime shapes, edge tiles in both dimensions, K spanning several
// chunks and not a multiple of BK, K = 0, a tile-sized product: every
// product of the dense family at every transpose.
TEST(TiledGemmTest, DenseFamilyEqualsOneThreadBody) {
  const Dims dims[] = {{1, 1, 1},     {37, 131, 53}, {64, 256, 64},
                       {65, 257, 63}, {70, 600, 21}, {5, 0, 3},
                       {66, 0, 70},   {2, 1000, 3},  {129, 17, 130}};
  uint32_t seed = 1;
  for (const Dims& d : dims) {
    for (const bool tx : {false, true}) {
      for (const bool tw : {false, true}) {
        for (const Product p :
             {Product::kForward, Product::kGradInput, Product::kGradWeight}) {
          ExpectDeviceTileBits(
              MakeProblem(d.m, d.k, d.n, tx, tw, p, 1, 1.0f, false, seed++));
        }
      }
    }
  }
}

// Batched entries with a scale (matmul.*): every entry's tiles, and the
// scale applied after the tree (including to K = 0's +0.0f).
TEST(TiledGemmTest, BatchedAndScaledEqualsOneThreadBody) {
  uint32_t seed = 100;
  for (const float scale : {1.0f, 0.125f, -0.17677669f}) {
    for (const Dims& d : {Dims{19, 300, 70}, Dims{3, 0, 20}, Dims{40, 9, 1}}) {
      ExpectDeviceTileBits(MakeProblem(d.m, d.k, d.n, false, true,
                                       Product::kForward, 3, scale, false,
                                       seed++));
    }
  }
}

// Reductions of 1 to 34 chunks (K = 256 q - 1, 256 q, 256 q + 7): every
// shape of the canonical tree up to 6 levels, on 16 x 16 tiles (2 x 2 per
// thread) at 1 and 3 blocks, and on the device tile for some of them.
TEST(TiledGemmTest, EveryChunkCountEqualsOneThreadBody) {
  using Small = GemmTile<16, 16, 8, 2, 2>;
  uint32_t seed = 200;
  for (int64_t q = 1; q <= 34; q += (q < 10 ? 1 : 8)) {
    for (const int64_t k : {256 * q - 1, 256 * q, 256 * q + 7}) {
      const Problem p = MakeProblem(9, k, 20, q % 2 == 1, false,
                                    Product::kForward, 1, 1.0f, false, seed++);
      SCOPED_TRACE(p.label);
      const std::vector<uint32_t> want = OneThreadBits(p);
      EXPECT_TRUE(SameWords(TiledBits<Small>(p, 1, false), want));
      EXPECT_TRUE(SameWords(TiledBits<Small>(p, 3, true), want));
      if (q <= 5 || q == 33) {
        EXPECT_TRUE(SameWords(TiledBits<DeviceGemmTile>(p, 1, false), want));
      }
    }
  }
}

// NaN (with payloads), +-Inf, -0 and subnormal inputs: the tiled chains
// and tree give the one-thread body's bits, NaN payloads included (the
// same fma and add operand order).
TEST(TiledGemmTest, SpecialValuesEqualOneThreadBody) {
  uint32_t seed = 300;
  for (const Dims& d : {Dims{70, 1500, 66}, Dims{37, 131, 53}}) {
    for (const Product p :
         {Product::kForward, Product::kGradInput, Product::kGradWeight}) {
      const Problem problem =
          MakeProblem(d.m, d.k, d.n, true, false, p, 1, 1.0f, true, seed++);
      // The inputs do produce non-finite outputs.
      int non_finite = 0;
      for (uint32_t w : OneThreadBits(problem)) {
        non_finite += (w & 0x7f800000u) == 0x7f800000u;
      }
      EXPECT_GT(non_finite, 0) << problem.label;
      ExpectDeviceTileBits(problem);
    }
  }
}

// Products of tiny values round to -0 (1e-30 * -1e-30 underflows), so
// every chain is -0; one more term (a zero-padded one, 0 * 0 = +0) would
// make it +0. K not a multiple of BK, with one and several chunks.
TEST(TiledGemmTest, UnderflowingChainsStayMinusZero) {
  for (const int64_t k : {1, 17, 300, 529}) {
    Problem p = MakeProblem(20, k, 20, false, false, Product::kForward, 1, 1.0f,
                            false, 1);
    std::fill(p.a.begin(), p.a.end(), 1e-30f);
    std::fill(p.b.begin(), p.b.end(), -1e-30f);
    SCOPED_TRACE(p.label);
    const std::vector<uint32_t> want = OneThreadBits(p);
    EXPECT_EQ(want[0], 0x80000000u);
    EXPECT_TRUE(SameWords(TiledBits<DeviceGemmTile>(p, 1, false), want));
    EXPECT_TRUE(
        SameWords(TiledBits<GemmTile<8, 8, 32, 2, 2>>(p, 2, false), want));
  }
}

// The bits do not depend on the tile shape or the slice depth: tiles of
// 16 x 16 (2 x 2 per thread, 8-deep slices), 32 x 64 (4 x 8, the whole
// 256-term chunk as one slice) and 8 x 24 (2 x 3, 32-deep) give the same
// outputs as the device tile and the one-thread body.
TEST(TiledGemmTest, BitsIndependentOfTileShapeAndDepth) {
  using Small = GemmTile<16, 16, 8, 2, 2>;
  using WholeChunk = GemmTile<32, 64, 256, 4, 8>;
  using Narrow = GemmTile<8, 24, 32, 2, 3>;
  uint32_t seed = 400;
  for (const Dims& d : {Dims{37, 1031, 53}, Dims{1, 1, 1}, Dims{33, 0, 17}}) {
    for (const bool tx : {false, true}) {
      const Problem p = MakeProblem(d.m, d.k, d.n, tx, !tx, Product::kForward,
                                    2, 0.5f, true, seed++);
      SCOPED_TRACE(p.label);
      const std::vector<uint32_t> want = OneThreadBits(p);
      EXPECT_TRUE(SameWords(TiledBits<Small>(p, 5, false), want));
      EXPECT_TRUE(SameWords(TiledBits<Small>(p, 1, true), want));
      EXPECT_TRUE(SameWords(TiledBits<WholeChunk>(p, 2, false), want));
      EXPECT_TRUE(SameWords(TiledBits<Narrow>(p, 64, true), want));
      EXPECT_TRUE(SameWords(TiledBits<DeviceGemmTile>(p, 1, false), want));
    }
  }
}

// The comparison can fail: one plain fma chain over all K (no chunks, no
// tree) gives other bits for some output of a multi-chunk product.
TEST(TiledGemmTest, ASingleChainWouldDiffer) {
  const Problem p = MakeProblem(20, 2000, 20, false, false, Product::kForward,
                                1, 1.0f, false, 7);
  const std::vector<uint32_t> canonical = OneThreadBits(p);
  int differ = 0;
  for (int64_t i = 0; i < p.s.m.rows; ++i) {
    for (int64_t j = 0; j < p.s.m.cols; ++j) {
      const float chain =
          c::ChainDot(p.a.data() + i * p.s.m.a_row, p.s.m.a_depth,
                      p.b.data() + j, p.s.m.b_depth, p.s.m.depth);
      differ += Bits(chain) != canonical[i * p.s.m.cols + j];
    }
  }
  EXPECT_GT(differ, 0);
}

TEST(TiledGemmTest, TreeLevelsAndScratch) {
  EXPECT_EQ(GemmTreeLevels(0), 0);
  EXPECT_EQ(GemmTreeLevels(256), 0);
  EXPECT_EQ(GemmTreeLevels(257), 1);   // 2 chunks
  EXPECT_EQ(GemmTreeLevels(513), 2);   // 3 chunks
  EXPECT_EQ(GemmTreeLevels(1024), 2);  // 4 chunks
  EXPECT_EQ(GemmTreeLevels(1025), 3);  // 5 chunks
  c::BatchedMatMulShape s;
  s.m.rows = 10;
  s.m.cols = 7;
  s.m.depth = 1025;
  s.batch = 2;
  EXPECT_EQ(GemmScratchFloats(s), 3 * 2 * 10 * 7);
  EXPECT_EQ(GemmTiles<DeviceGemmTile>(s), 2);
  s.m.rows = 65;
  s.m.cols = 129;
  EXPECT_EQ(GemmTiles<DeviceGemmTile>(s), 2 * 2 * 3);
}

// ---- every configuration ----------------------------------------------------

// Configuration `config` (WithGemmConfig) on `blocks` emulated blocks.
std::vector<uint32_t> ConfigBits(int config, const Problem& p, int64_t blocks,
                                 bool reverse_threads) {
  std::vector<uint32_t> bits;
  EXPECT_TRUE(WithGemmConfig(config, [&](auto tile) {
    bits = TiledBits<decltype(tile)>(p, blocks, reverse_threads);
  }));
  return bits;
}

int64_t ConfigTiles(int config, const Problem& p) {
  int64_t tiles = 0;
  WithGemmConfig(config,
                 [&](auto tile) { tiles = GemmTiles<decltype(tile)>(p.s); });
  return tiles;
}

// Every configuration the device kernels are built with at 3 blocks (fewer
// than the tiles of the larger shapes: grid-stride) and at more blocks than
// tiles with reversed thread order.
void ExpectEveryConfigBits(const Problem& p) {
  SCOPED_TRACE(p.label);
  const std::vector<uint32_t> want = OneThreadBits(p);
  for (int config = 0; config < kGemmConfigs; ++config) {
    SCOPED_TRACE(GemmConfigName(config));
    EXPECT_TRUE(SameWords(ConfigBits(config, p, 3, false), want)) << "3 blocks";
    EXPECT_TRUE(SameWords(
        ConfigBits(config, p, ConfigTiles(config, p) + 5, true), want))
        << "reversed threads";
  }
}

TEST(TiledGemmConfigTest, ConfigurationsAreDistinctAndPlannedIsOne) {
  for (int config = 0; config < kGemmConfigs; ++config) {
    int threads = 0;
    EXPECT_TRUE(WithGemmConfig(
        config, [&](auto tile) { threads = decltype(tile)::kThreads; }));
    EXPECT_EQ(threads, 256) << GemmConfigName(config);
    for (int other = 0; other < config; ++other) {
      EXPECT_NE(std::string(GemmConfigName(config)),
                std::string(GemmConfigName(other)));
    }
  }
  EXPECT_FALSE(WithGemmConfig(-1, [](auto) {}));
  EXPECT_FALSE(WithGemmConfig(kGemmConfigs, [](auto) {}));
  int planned = 0;
  for (int config = 0; config < kGemmConfigs; ++config) {
    WithGemmConfig(config, [&](auto tile) {
      if (std::is_same_v<decltype(tile), PlannedGemmTile>) {
        ++planned;
        EXPECT_EQ(config, kPlannedGemmConfig);
      }
    });
  }
  EXPECT_EQ(planned, 1);
}

// Shapes of DenseFamilyEqualsOneThreadBody (edge tiles, K = 0, K not a
// multiple of any BK) as every product of the dense family at every
// transpose, and products of two and three chunks with edge tiles at every
// transpose, on every configuration.
TEST(TiledGemmConfigTest, DenseFamilyEqualsOneThreadBody) {
  const Dims dims[] = {
      {1, 1, 1}, {37, 131, 53}, {5, 0, 3}, {66, 0, 70}, {129, 17, 130}};
  uint32_t seed = 600;
  for (const Dims& d : dims) {
    for (const bool tx : {false, true}) {
      for (const bool tw : {false, true}) {
        for (const Product p :
             {Product::kForward, Product::kGradInput, Product::kGradWeight}) {
          ExpectEveryConfigBits(
              MakeProblem(d.m, d.k, d.n, tx, tw, p, 1, 1.0f, false, seed++));
        }
      }
    }
  }
  for (const Dims& d : {Dims{65, 257, 63}, Dims{130, 530, 68}}) {
    for (const bool tx : {false, true}) {
      for (const bool tw : {false, true}) {
        ExpectEveryConfigBits(MakeProblem(
            d.m, d.k, d.n, tx, tw, Product::kForward, 1, 1.0f, false, seed++));
      }
    }
  }
}

// Aligned operands whose leading dimensions are multiples of 4, with whole
// tiles of every configuration (up to 128 x 128) beside edge tiles: the
// whole slices of whole tiles are fetched unchecked (PipelinedFastFetch),
// the ragged last slice (K = 520 and 264 are not multiples of 16) and the
// edge tiles through the checked path; every transpose and product, three
// batch entries; the same bits.
TEST(TiledGemmConfigTest, AlignedWholeTilesEqualOneThreadBody) {
  uint32_t seed = 650;
  for (const bool tx : {false, true}) {
    for (const bool tw : {false, true}) {
      for (const Product p :
           {Product::kForward, Product::kGradInput, Product::kGradWeight}) {
        ExpectEveryConfigBits(
            MakeProblem(256, 520, 128, tx, tw, p, 1, 1.0f, false, seed++));
      }
      ExpectEveryConfigBits(MakeProblem(
          132, 264, 132, tx, tw, Product::kForward, 1, 1.0f, false, seed++));
    }
  }
  ExpectEveryConfigBits(MakeProblem(128, 272, 64, false, false,
                                    Product::kForward, 3, 0.5f, false, seed++));
}

// Batched and scaled entries; NaN / Inf / -0 / subnormal inputs.
TEST(TiledGemmConfigTest, BatchedScaledAndSpecialValues) {
  uint32_t seed = 700;
  for (const float scale : {0.125f, -0.17677669f}) {
    for (const Dims& d : {Dims{19, 300, 70}, Dims{3, 0, 20}, Dims{136, 9, 4}}) {
      ExpectEveryConfigBits(MakeProblem(d.m, d.k, d.n, false, true,
                                        Product::kForward, 3, scale, false,
                                        seed++));
    }
  }
  for (const Product p :
       {Product::kForward, Product::kGradInput, Product::kGradWeight}) {
    ExpectEveryConfigBits(
        MakeProblem(131, 700, 66, true, false, p, 1, 1.0f, true, seed++));
  }
}

// Operands at addresses that are not 16-byte aligned (and odd leading
// dimensions): the vector loads fall back to scalar ones, same bits.
TEST(TiledGemmConfigTest, UnalignedOperandsEqualOneThreadBody) {
  uint32_t seed = 800;
  for (const Dims& d : {Dims{64, 520, 132}, Dims{33, 261, 67}}) {
    for (const bool tx : {false, true}) {
      for (const bool tw : {false, true}) {
        Problem p = MakeProblem(d.m, d.k, d.n, tx, tw, Product::kForward, 1,
                                1.0f, false, seed++);
        p.a.insert(p.a.begin(), 7.0f);
        p.b.insert(p.b.begin(), -3.0f);
        p.b.insert(p.b.begin(), 5.0f);
        const std::vector<uint32_t> want = [&] {
          std::vector<float> out(static_cast<size_t>(p.out_size));
          BatchedMatMulThread(p.s, p.a.data() + 1, p.b.data() + 2, out.data(),
                              0, 1);
          std::vector<uint32_t> bits(out.size());
          for (size_t i = 0; i < out.size(); ++i) bits[i] = Bits(out[i]);
          return bits;
        }();
        for (int config = 0; config < kGemmConfigs; ++config) {
          SCOPED_TRACE(absl::StrCat(p.label, " ", GemmConfigName(config)));
          std::vector<float> out(static_cast<size_t>(p.out_size),
                                 FromBits(kPoison));
          std::vector<float> scratch(
              static_cast<size_t>(GemmConfigScratchFloats(config, p.s)) + 1);
          WithGemmConfig(config, [&](auto tile) {
            EmulateTiledGemm<decltype(tile)>(p.s, p.a.data() + 1,
                                             p.b.data() + 2, out.data(),
                                             scratch.data() + 1, 2);
          });
          std::vector<uint32_t> got(out.size());
          for (size_t i = 0; i < out.size(); ++i) got[i] = Bits(out[i]);
          EXPECT_TRUE(SameWords(got, want));
        }
      }
    }
  }
}

// 1 to 34 chunks on small pipelined tiles, whole tiles (their remapped
// scratch slots) and edge tiles: every tree shape up to 6 levels; and a few
// chunk counts on the pipelined device configurations.
TEST(TiledGemmConfigTest, EveryChunkCountEqualsOneThreadBody) {
  using Small = PipelinedGemmTile<16, 16, 8, 4, 4>;
  using Flat = PipelinedGemmTile<8, 16, 4, 4, 4>;
  uint32_t seed = 900;
  for (int64_t q = 1; q <= 34; q += (q < 10 ? 1 : 8)) {
    for (const int64_t k : {256 * q - 1, 256 * q, 256 * q + 7}) {
      const Problem p = MakeProblem(17, k, 20, q % 2 == 1, false,
                                    Product::kForward, 1, 1.0f, false, seed++);
      SCOPED_TRACE(p.label);
      const std::vector<uint32_t> want = OneThreadBits(p);
      EXPECT_TRUE(SameWords(TiledBits<Small>(p, 1, false), want));
      EXPECT_TRUE(SameWords(TiledBits<Small>(p, 3, true), want));
      EXPECT_TRUE(SameWords(TiledBits<Flat>(p, 2, true), want));
      if (q <= 3) {
        for (int config = 1; config < kGemmConfigs; ++config) {
          EXPECT_TRUE(SameWords(ConfigBits(config, p, 1, true), want))
              << GemmConfigName(config);
        }
      }
    }
  }
  // Whole 128 x 128 tiles with 5 chunks (3 tree levels in remapped slots).
  const Problem p = MakeProblem(256, 1100, 128, false, false, Product::kForward,
                                1, 1.0f, false, seed++);
  const std::vector<uint32_t> want = OneThreadBits(p);
  EXPECT_TRUE(SameWords(TiledBits<PlannedGemmTile>(p, 1, true), want));
  EXPECT_TRUE(SameWords(TiledBits<GemmConfigTile<3>::type>(p, 3, false), want));
}

// -0 chains: a ragged last slice is not zero-padded into the chains.
TEST(TiledGemmConfigTest, UnderflowingChainsStayMinusZero) {
  for (const int64_t k : {1, 13, 300, 529}) {
    Problem p = MakeProblem(20, k, 20, false, false, Product::kForward, 1, 1.0f,
                            false, 1);
    std::fill(p.a.begin(), p.a.end(), 1e-30f);
    std::fill(p.b.begin(), p.b.end(), -1e-30f);
    SCOPED_TRACE(p.label);
    const std::vector<uint32_t> want = OneThreadBits(p);
    EXPECT_EQ(want[0], 0x80000000u);
    for (int config = 0; config < kGemmConfigs; ++config) {
      EXPECT_TRUE(SameWords(ConfigBits(config, p, 1, false), want))
          << GemmConfigName(config);
    }
  }
}

// A pipelined tile's scratch: the levels of every whole tile, edge tiles
// counted whole; the first kernel's: the levels of every output.
TEST(TiledGemmConfigTest, ScratchOfEachConfiguration) {
  c::BatchedMatMulShape s;
  s.m.rows = 130;
  s.m.cols = 70;
  s.m.depth = 1025;  // 5 chunks, 3 levels
  s.batch = 2;
  EXPECT_EQ(GemmConfigScratchFloats(0, s), 3 * 2 * 130 * 70);
  EXPECT_EQ(GemmConfigScratchFloats(1, s), 3 * (2 * 2 * 1) * 128 * 128);
  EXPECT_EQ(GemmConfigScratchFloats(3, s), 3 * (2 * 2 * 2) * 128 * 64);
  EXPECT_EQ(GemmConfigScratchFloats(4, s), 3 * (2 * 3 * 2) * 64 * 64);
  EXPECT_EQ(GemmConfigScratchFloats(kGemmConfigs, s), 0);
  s.m.depth = 256;
  for (int config = 0; config < kGemmConfigs; ++config) {
    EXPECT_EQ(GemmConfigScratchFloats(config, s), 0);
  }
}

// ---- through the planner ---------------------------------------------------

bool HasTiledLaunch(const DeviceCall& call) {
  for (const Launch& l : call.launches) {
    if (l.params.op == DeviceOp::kTiledMatMul) return true;
  }
  return false;
}

// The configurations of a call's tiled launches, in order.
std::vector<int> TiledConfigs(const DeviceCall& call) {
  std::vector<int> configs;
  for (const Launch& l : call.launches) {
    if (l.params.op == DeviceOp::kTiledMatMul) {
      configs.push_back(l.params.gemm_config);
    }
  }
  return configs;
}

// dense.*, matmul.* and conv2d / conv_transpose2d calls the planner tiles (and
// some it does not), on emulated grids, = the CPU backend's bits, with the
// planned tile and (on a device of more multiprocessors than any product
// has tiles) the few-tiles one; with tiling off, the same calls run one
// thread per output and give the same bits.
TEST(TiledGemmPlanTest, TiledCallsEqualCpuBackend) {
  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  const LaunchConfig configs[] = {{1, 32}, {7, 128}, {0, 256}};
  struct Variant {
    bool tiling;
    int64_t multiprocessors;
    int config;  // of every tiled launch
  };
  const Variant variants[] = {{true, 0, kPlannedGemmConfig},
                              {true, int64_t{1} << 40, kFewTilesGemmConfig},
                              {false, 0, -1}};
  for (const testing::TiledProductCase& t : testing::TiledProductCases(500)) {
    const OpCase& c = t.c;
    absl::StatusOr<std::vector<Tensor>> want =
        RunRegistered(cpu, kCpuBackendName, c);
    ASSERT_TRUE(want.ok()) << c.label << ": " << want.status();
    for (const Variant& v : variants) {
      for (const LaunchConfig& config : configs) {
        SCOPED_TRACE(absl::StrFormat("%s, tiling %d, %d SMs, %d x %d", c.label,
                                     v.tiling, v.multiprocessors, config.blocks,
                                     config.threads_per_block));
        std::vector<Tensor> got = CloneAll(c.outputs);
        PlanOptions options;
        options.tiled_gemm = v.tiling;
        options.device_multiprocessors = v.multiprocessors;
        absl::StatusOr<DeviceCall> call = PlanCanonicalOp(
            c.op, c.inputs, absl::MakeSpan(got), c.attrs, options);
        ASSERT_TRUE(call.ok()) << call.status();
        EXPECT_EQ(HasTiledLaunch(*call), v.tiling && t.tiled);
        for (const int used : TiledConfigs(*call)) EXPECT_EQ(used, v.config);
        ASSERT_TRUE(RunEmulated(*call, config).ok());
        for (size_t o = 0; o < got.size(); ++o) {
          EXPECT_TRUE(SameBits(got[o], (*want)[o])) << "output " << o;
        }
      }
    }
  }
}

int CountLaunches(const DeviceCall& call, DeviceOp op) {
  int count = 0;
  for (const Launch& l : call.launches) count += l.params.op == op ? 1 : 0;
  return count;
}

// The lowered conv2d grad_weight (and conv_transpose2d.grad_weight) with its
// reduction split into runs of 1, 2, 4 and 8 chunks and not split at all:
// always the CPU backend's bits (runs of several chunks carry their own
// tree levels; ragged and whole last runs; a last run shorter than the
// slice depth or than kTiledGemmMinDim).
TEST(TiledGemmPlanTest, SplitGradWeightEqualsCpuBackend) {
  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  int split = 0;
  int ragged = 0;
  for (const testing::TiledProductCase& t : testing::TiledProductCases(501)) {
    const OpCase& c = t.c;
    if (!t.tiled || (c.op != op::kConv2dGradWeight &&
                     c.op != op::kConvTranspose2dGradWeight)) {
      continue;
    }
    absl::StatusOr<std::vector<Tensor>> want =
        RunRegistered(cpu, kCpuBackendName, c);
    ASSERT_TRUE(want.ok()) << c.label << ": " << want.status();
    for (const int64_t split_blocks : {1, 2, 3, 4, 8, 16, 100}) {
      SCOPED_TRACE(
          absl::StrFormat("%s, split_blocks %d", c.label, split_blocks));
      std::vector<Tensor> got = CloneAll(c.outputs);
      PlanOptions options;
      options.split_blocks = split_blocks;
      absl::StatusOr<DeviceCall> call = PlanCanonicalOp(
          c.op, c.inputs, absl::MakeSpan(got), c.attrs, options);
      ASSERT_TRUE(call.ok()) << call.status();
      EXPECT_TRUE(HasTiledLaunch(*call));
      const int sums = CountLaunches(*call, DeviceOp::kTreeSumParts);
      if (split_blocks == 1) {
        EXPECT_EQ(sums, 0);
      }
      split += sums;
      for (const Launch& l : call->launches) {
        if (l.in_offset[0] > 0) ++ragged;
      }
      ASSERT_TRUE(RunEmulated(*call, {0, 256}).ok());
      ASSERT_TRUE(RunEmulated(*call, {2, 64}).ok());
      EXPECT_TRUE(SameBits(got[0], (*want)[0]));
    }
  }
  // Both kinds of split plans occurred.
  EXPECT_GE(split, 10);
  EXPECT_GE(ragged, 5);
}

// Every term of a lowered grad_weight underflows to -0 (dy = -1e-30,
// x = 1e-30, no padding): each chunk's chain is -0, and so is the sum of
// the runs' parts; a sum of parts starting from +0.0f would give +0.
TEST(TiledGemmPlanTest, SplitGradWeightKeepsMinusZero) {
  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  OpCase c;
  c.label = "conv2d.grad_weight of underflowing terms";
  c.op = op::kConv2dGradWeight;
  c.inputs = {Tensor::Zeros(DType::kFloat32, {2, 3, 16, 16}).value(),
              Tensor::Zeros(DType::kFloat32, {2, 16, 14, 14}).value()};
  std::fill_n(c.inputs[0].data<float>(), c.inputs[0].numel(), 1e-30f);
  std::fill_n(c.inputs[1].data<float>(), c.inputs[1].numel(), -1e-30f);
  c.outputs = {Tensor::Zeros(DType::kFloat32, {16, 3, 3, 3}).value()};
  absl::StatusOr<std::vector<Tensor>> want =
      RunRegistered(cpu, kCpuBackendName, c);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int64_t i = 0; i < (*want)[0].numel(); ++i) {
    ASSERT_EQ(Bits((*want)[0].data<float>()[i]), 0x80000000u) << i;
  }
  for (const int64_t split_blocks : {1, 2, 4096}) {
    SCOPED_TRACE(absl::StrFormat("split_blocks %d", split_blocks));
    std::vector<Tensor> got = CloneAll(c.outputs);
    PlanOptions options;
    options.split_blocks = split_blocks;
    absl::StatusOr<DeviceCall> call =
        PlanCanonicalOp(c.op, c.inputs, absl::MakeSpan(got), c.attrs, options);
    ASSERT_TRUE(call.ok()) << call.status();
    EXPECT_EQ(CountLaunches(*call, DeviceOp::kTreeSumParts),
              split_blocks == 1 ? 0 : 1);
    ASSERT_TRUE(RunEmulated(*call, {0, 256}).ok());
    EXPECT_TRUE(SameBits(got[0], (*want)[0]));
  }
}

// The plan of the benchmark's ResNet layer (N = 32, 64 -> 64 channels,
// 56 x 56, 3 x 3, padding 1): the launches and the device scratch they
// need, in bytes.
TEST(TiledGemmPlanTest, ResNetLayerGradientPlans) {
  OpAttrs a;
  a.pad_top = a.pad_bottom = a.pad_left = a.pad_right = 1;
  const std::vector<int64_t> xs = {32, 64, 56, 56}, ws = {64, 64, 3, 3};
  auto scratch = [](const DeviceCall& call) {
    int64_t bytes = 0;
    for (const CallBuffer& b : call.buffers) {
      if (b.host == nullptr) bytes += b.bytes;
    }
    return bytes;
  };
  std::vector<Tensor> dx = {Tensor::Zeros(DType::kFloat32, xs).value()};
  std::vector<Tensor> gi_in = {Tensor::Zeros(DType::kFloat32, xs).value(),
                               Tensor::Zeros(DType::kFloat32, ws).value()};
  absl::StatusOr<DeviceCall> gi =
      PlanCanonicalOp(op::kConv2dGradInput, gi_in, absl::MakeSpan(dx), a);
  ASSERT_TRUE(gi.ok()) << gi.status();
  ASSERT_EQ(gi->launches.size(), 3u);
  EXPECT_EQ(gi->launches[0].params.op, DeviceOp::kConv2dGradInputCol);
  EXPECT_EQ(gi->launches[1].params.op, DeviceOp::kTranspose);
  EXPECT_EQ(gi->launches[2].params.op, DeviceOp::kTiledMatMul);
  // The planned tile (128 x 64): per image 25 tiles of 128 of the 3136
  // pixels by one of the 64 channels.
  const c::BatchedMatMulShape& product = gi->launches[2].params.batched_matmul;
  EXPECT_EQ(PlannedGemmTile::kBM, 128);
  EXPECT_EQ(PlannedGemmTile::kBN, 64);
  EXPECT_EQ(gi->launches[2].params.work, 32 * 25);
  EXPECT_EQ(GemmTiles<PlannedGemmTile>(product), 32 * 25);
  // col 32 x 576 x 3136, w' 64 x 64 x 9, and the tree levels of a K of 576
  // (3 chunks: 2 levels) in the planned tile's per-tile layout.
  EXPECT_EQ(scratch(*gi),
            4 * (int64_t{32} * 576 * 3136 + 64 * 64 * 9 +
                 GemmTileScratchFloats<PlannedGemmTile>(product)));
  EXPECT_GE(GemmTileScratchFloats<PlannedGemmTile>(product),
            int64_t{2} * 32 * 64 * 3136);
  std::vector<Tensor> dw = {Tensor::Zeros(DType::kFloat32, ws).value()};
  std::vector<Tensor> gw_in = {Tensor::Zeros(DType::kFloat32, xs).value(),
                               Tensor::Zeros(DType::kFloat32, xs).value()};
  absl::StatusOr<DeviceCall> gw =
      PlanCanonicalOp(op::kConv2dGradWeight, gw_in, absl::MakeSpan(dw), a);
  ASSERT_TRUE(gw.ok()) << gw.status();
  ASSERT_EQ(gw->launches.size(), 4u);
  EXPECT_EQ(gw->launches[0].params.op, DeviceOp::kTranspose);
  EXPECT_EQ(gw->launches[1].params.op, DeviceOp::kConv2dGradWeightCol);
  EXPECT_EQ(gw->launches[2].params.op, DeviceOp::kTiledMatMul);
  // 100352 terms = 392 chunks, 1 x 9 tiles: one run per chunk.
  EXPECT_EQ(gw->launches[2].params.batched_matmul.batch, 392);
  EXPECT_EQ(gw->launches[2].params.work, 392 * 9);
  EXPECT_EQ(gw->launches[3].params.op, DeviceOp::kTreeSumParts);
  EXPECT_EQ(gw->launches[3].params.tree_parts, 392);
  // dy' 64 x 100352, col 576 x 100352, parts 392 x 64 x 576.
  EXPECT_EQ(scratch(*gw), 4 * (int64_t{64} * 100352 + int64_t{576} * 100352 +
                               int64_t{392} * 64 * 576));
}

// The few-tiles configuration runs exactly the products of at most half as
// many planned tiles as the device has multiprocessors, and only on a known
// device; its launch covers its own tiles with scratch of its own layout.
TEST(TiledGemmPlanTest, FewTilesConfigurationForSmallProducts) {
  c::DenseShape d;
  d.m = 1024;
  d.k = 1024;
  d.n = 1024;
  c::BatchedMatMulShape s;
  s.m = c::DenseForwardShape(d);
  s.batch = 1;
  s.scale = 1.0f;
  ASSERT_EQ(GemmTiles<PlannedGemmTile>(s), 128);  // 8 x 16 tiles of 128 x 64
  EXPECT_EQ(PlanGemmConfig(s, 0), kPlannedGemmConfig);
  EXPECT_EQ(PlanGemmConfig(s, 132), kPlannedGemmConfig);
  EXPECT_EQ(PlanGemmConfig(s, 255), kPlannedGemmConfig);
  EXPECT_EQ(PlanGemmConfig(s, 256), kFewTilesGemmConfig);
  s.m.rows = 512;  // 64 planned tiles
  EXPECT_EQ(PlanGemmConfig(s, 132), kFewTilesGemmConfig);
  s.batch = 4;
  EXPECT_EQ(PlanGemmConfig(s, 132), kPlannedGemmConfig);

  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  // 300 x 600 x 200: 3 x 4 = 12 planned tiles, 5 x 4 = 20 few-tiles ones,
  // 3 chunks (tree scratch).
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  OpCase c;
  c.label = "dense.forward m=300 k=600 n=200";
  c.op = op::kDenseForward;
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{300, 600}, std::vector<int64_t>{600, 200}}) {
    Tensor t = Tensor::Zeros(DType::kFloat32, shape).value();
    for (float& f : t.span<float>()) f = u(rng);
    c.inputs.push_back(std::move(t));
  }
  c.outputs.push_back(Tensor::Zeros(DType::kFloat32, {300, 200}).value());
  absl::StatusOr<std::vector<Tensor>> want =
      RunRegistered(cpu, kCpuBackendName, c);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const int64_t sms : {int64_t{23}, int64_t{24}}) {
    SCOPED_TRACE(absl::StrFormat("%d SMs", sms));
    std::vector<Tensor> got = CloneAll(c.outputs);
    PlanOptions options;
    options.device_multiprocessors = sms;
    absl::StatusOr<DeviceCall> call =
        PlanCanonicalOp(c.op, c.inputs, absl::MakeSpan(got), c.attrs, options);
    ASSERT_TRUE(call.ok()) << call.status();
    ASSERT_EQ(call->launches.size(), 1u);
    const KernelParams& p = call->launches[0].params;
    EXPECT_EQ(p.gemm_config,
              sms == 23 ? kPlannedGemmConfig : kFewTilesGemmConfig);
    EXPECT_EQ(p.work, sms == 23 ? 12 : 20);
    ASSERT_EQ(call->buffers.size(), 4u);  // x, w, y, tree scratch
    EXPECT_EQ(call->buffers[3].bytes,
              int64_t{sizeof(float)} *
                  GemmConfigScratchFloats(p.gemm_config, p.batched_matmul));
    ASSERT_TRUE(RunEmulated(*call, {0, 256}).ok());
    EXPECT_TRUE(SameBits(got[0], (*want)[0]));
  }
}

// The tiled launch's grid: its own block size, the config's block count,
// else one block per tile (capped).
TEST(TiledGemmPlanTest, GridOfTheTiledLaunch) {
  KernelParams p;
  p.op = DeviceOp::kTiledMatMul;
  p.work = 10;
  LaunchGrid g = GridFor(p, {0, 32});
  EXPECT_EQ(g.blocks, 10);
  EXPECT_EQ(g.threads_per_block, DeviceGemmTile::kThreads);
  g = GridFor(p, {3, 1024});
  EXPECT_EQ(g.blocks, 3);
  EXPECT_EQ(g.threads_per_block, DeviceGemmTile::kThreads);
  p.work = 1 << 20;
  EXPECT_EQ(GridFor(p, {}).blocks, kMaxAutoBlocks);
  p.op = DeviceOp::kMatMul;
  p.work = 1000;
  g = GridFor(p, {0, 128});
  EXPECT_EQ(g.blocks, 8);
  EXPECT_EQ(g.threads_per_block, 128);
}

}  // namespace
}  // namespace lockstep::kernels::cuda
