// The CANONICAL batch_norm kernels in training mode (and layer_norm's, over
// rows) run their per-channel
// reductions on the lane kernels (lanes = channels, blocks transposed in
// registers): on every ISA path this CPU has and on 1, 2, 3 and 8 threads
// their bits equal the spec code of kernels/ops/norm.h (GatherChain, one
// channel at a time), also when the gradients take the batch statistics the
// forward saved, on shapes whose channel counts leave tails of every
// width, whose planes are shorter and longer than a vector and not a
// multiple of it, and whose reductions cross the 256-term chunk boundary
// inside a transposed block; with NaN, infinities, -0 and subnormals.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/canonical_kernel_test.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/norm.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

std::vector<float> RandomFloats(int64_t n, uint32_t seed, bool specials) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(gen);
  if (specials && n > 40) {
    v[3] = -0.0f;
    v[7] = 1e-40f;  // subnormal
    v[11] = std::numeric_limits<float>::infinity();
    v[n - 5] = std::numeric_limits<float>::quiet_NaN();
    v[n / 2] = -std::numeric_limits<float>::infinity();
  }
  return v;
}

Tensor T(std::vector<int64_t> shape, const std::vector<float>& v) {
  return FloatTensor(std::move(shape), v);
}

class BatchNormLanesTest : public CpuCanonicalKernelTest {};

TEST_F(BatchNormLanesTest, EveryIsaAndThreadCountGivesTheSpecBits) {
  // [n, c, spatial...]: c = 37, 20 and 40 leave tails after blocks of 8 and
  // 16 (run as one partial block); planes of 63, 110, 4, 1 and 529
  // elements; 189, 550, 2048, 600, 300 and 2116 terms per channel (550 and
  // 600 cross chunk boundaries inside a block). [4, 40, 23, 23] is large
  // enough for the elementwise passes to split over the pool.
  const std::vector<std::vector<int64_t>> shapes = {
      {3, 37, 7, 9},
      {5, 20, 10, 11},
      {2, 16, 32, 32},
      {150, 24, 2, 2},
      {300, 9},
      {4, 3, 5, 5},
      {4, 40, 23, 23},
      // Fewer channel blocks than threads: the chains cut into runs of
      // chunks across the pool (a partial block; runs cut mid-row).
      {8, 8, 48, 48},
      {3, 5, 61, 67}};
  uint32_t seed = 1;
  for (const std::vector<int64_t>& shape : shapes) {
    for (const bool specials : {false, true}) {
      const std::string label =
          absl::StrCat("shape [", absl::StrJoin(shape, ","), "]",
                       specials ? " specials" : "");
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      const int64_t ch = shape[1];
      c::ChannelShape s;
      s.n = shape[0];
      s.c = ch;
      s.spatial = numel / (s.n * s.c);
      s.epsilon = 1e-5f;
      s.momentum = 0.1f;
      const std::vector<float> x = RandomFloats(numel, seed++, specials);
      const std::vector<float> dy = RandomFloats(numel, seed++, specials);
      const std::vector<float> gamma = RandomFloats(ch, seed++, false);
      const std::vector<float> beta = RandomFloats(ch, seed++, false);
      std::vector<float> running(2 * ch);
      for (int64_t i = 0; i < ch; ++i) {
        running[i] = 0.25f;
        running[ch + i] = 1.5f;
      }
      // The spec.
      std::vector<float> want_y(numel), want_running = running, want_dx(numel),
                                        want_dg(ch), want_db(ch);
      c::BatchNormForward(s, x.data(), gamma.data(), beta.data(), want_y.data(),
                          want_running.data());
      c::BatchNormGradInput(s, x.data(), gamma.data(), dy.data(),
                            running.data(), want_dx.data());
      c::BatchNormGradParams(s, x.data(), dy.data(), running.data(),
                             want_dg.data(), want_db.data());
      // The batch statistics the forward saves: row 0 the means, row 1 rstd.
      std::vector<float> want_saved(2 * ch);
      for (int64_t i = 0; i < ch; ++i) {
        const c::BatchNormChannelStats st =
            c::BatchNormStatsOf(s, x.data(), running.data(), i);
        want_saved[i] = st.mean;
        want_saved[ch + i] = st.rstd;
      }

      OpAttrs attrs;
      attrs.batch_norm_eval = false;
      attrs.norm_epsilon = s.epsilon;
      attrs.batch_norm_momentum = s.momentum;
      for (CpuIsa isa : SupportedCpuIsas()) {
        SetCpuIsaForTesting(isa);
        // Each thread count twice, the second time with y and dx written
        // by non-temporal stores (StreamOutput, lane_kernels.h).
        for (int run = 0; run < 8; ++run) {
          const int threads = std::array<int, 4>{1, 2, 3, 8}[run / 2];
          const bool streamed = run % 2 == 1;
          SetCpuThreadsForTesting(threads);
          cpu_internal::SetStreamOutputFloatsForTesting(streamed ? 1 : 0);
          const std::string where =
              absl::StrCat(label, ", isa ", CpuIsaName(isa), ", ", threads,
                           " threads", streamed ? ", outputs streamed" : "");
          {
            Tensor in[] = {T(shape, x), T({ch}, gamma), T({ch}, beta)};
            Tensor out[] = {T(shape, std::vector<float>(numel)),
                            T({2, ch}, running)};
            ASSERT_TRUE(Kernel(op::kBatchNormForward)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_y, "y, " + where);
            ExpectSameBits(out[1], want_running, "running, " + where);
          }
          {
            // With the saved statistics as a third output: y and running
            // unchanged.
            Tensor in[] = {T(shape, x), T({ch}, gamma), T({ch}, beta)};
            Tensor out[] = {T(shape, std::vector<float>(numel)),
                            T({2, ch}, running),
                            T({2, ch}, std::vector<float>(2 * ch))};
            ASSERT_TRUE(Kernel(op::kBatchNormForward)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_y, "y with saved, " + where);
            ExpectSameBits(out[1], want_running,
                           "running with saved, " + where);
            ExpectSameBits(out[2], want_saved, "saved, " + where);
          }
          {
            // Both gradients from the saved statistics: the spec's bits.
            Tensor in[] = {T(shape, x), T({ch}, gamma), T(shape, dy),
                           T({2, ch}, running), T({2, ch}, want_saved)};
            Tensor out[] = {T(shape, std::vector<float>(numel))};
            ASSERT_TRUE(Kernel(op::kBatchNormGradInput)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_dx, "dx from saved, " + where);
            Tensor pin[] = {T(shape, x), T(shape, dy), T({2, ch}, running),
                            T({2, ch}, want_saved)};
            Tensor pout[] = {T({ch}, std::vector<float>(ch)),
                             T({ch}, std::vector<float>(ch))};
            ASSERT_TRUE(
                Kernel(op::kBatchNormGradParams)(absl::MakeConstSpan(pin),
                                                 absl::MakeSpan(pout), attrs)
                    .ok())
                << where;
            ExpectSameBits(pout[0], want_dg, "dgamma from saved, " + where);
            ExpectSameBits(pout[1], want_db, "dbeta from saved, " + where);
            // Both gradients in one call (gamma in, dx out): each with the
            // bits of its own op.
            Tensor bin[] = {T(shape, x), T(shape, dy), T({2, ch}, running),
                            T({2, ch}, want_saved), T({ch}, gamma)};
            Tensor bout[] = {T({ch}, std::vector<float>(ch)),
                             T({ch}, std::vector<float>(ch)),
                             T(shape, std::vector<float>(numel))};
            ASSERT_TRUE(
                Kernel(op::kBatchNormGradParams)(absl::MakeConstSpan(bin),
                                                 absl::MakeSpan(bout), attrs)
                    .ok())
                << where;
            ExpectSameBits(bout[0], want_dg, "dgamma of both, " + where);
            ExpectSameBits(bout[1], want_db, "dbeta of both, " + where);
            ExpectSameBits(bout[2], want_dx, "dx of both, " + where);
          }
          {
            Tensor in[] = {T(shape, x), T({ch}, gamma), T(shape, dy),
                           T({2, ch}, running)};
            Tensor out[] = {T(shape, std::vector<float>(numel))};
            ASSERT_TRUE(Kernel(op::kBatchNormGradInput)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_dx, "dx, " + where);
          }
          {
            Tensor in[] = {T(shape, x), T(shape, dy), T({2, ch}, running)};
            Tensor out[] = {T({ch}, std::vector<float>(ch)),
                            T({ch}, std::vector<float>(ch))};
            ASSERT_TRUE(Kernel(op::kBatchNormGradParams)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_dg, "dgamma, " + where);
            ExpectSameBits(out[1], want_db, "dbeta, " + where);
          }
        }
      }
    }
  }
}

// The gradients take the saved statistics as given (they do not compute
// them again): other statistics give other results; eval mode ignores
// them; a saved tensor of the wrong shape or dtype is refused by name.
TEST_F(BatchNormLanesTest, GradientsUseTheSavedStatisticsAndCheckThem) {
  const std::vector<int64_t> shape = {4, 20, 6, 6};
  const int64_t ch = 20, numel = 4 * 20 * 36;
  const std::vector<float> x = RandomFloats(numel, 91, false);
  const std::vector<float> dy = RandomFloats(numel, 92, false);
  const std::vector<float> gamma = RandomFloats(ch, 93, false);
  std::vector<float> running(2 * ch, 1.0f);
  OpAttrs attrs;
  attrs.batch_norm_eval = false;
  std::vector<float> saved(2 * ch);
  {
    Tensor in[] = {T(shape, x), T({ch}, gamma), T({ch}, gamma)};
    Tensor out[] = {T(shape, std::vector<float>(numel)), T({2, ch}, running),
                    T({2, ch}, saved)};
    ASSERT_TRUE(Kernel(op::kBatchNormForward)(absl::MakeConstSpan(in),
                                              absl::MakeSpan(out), attrs)
                    .ok());
    std::memcpy(saved.data(), out[2].data<float>(), saved.size() * 4);
  }
  auto grads = [&](const std::vector<float>* given, const OpAttrs& a) {
    std::vector<Tensor> in = {T(shape, x), T({ch}, gamma), T(shape, dy),
                              T({2, ch}, running)};
    std::vector<Tensor> pin = {T(shape, x), T(shape, dy), T({2, ch}, running)};
    if (given != nullptr) {
      in.push_back(T({2, ch}, *given));
      pin.push_back(T({2, ch}, *given));
    }
    Tensor out[] = {T(shape, std::vector<float>(numel))};
    Tensor pout[] = {T({ch}, std::vector<float>(ch)),
                     T({ch}, std::vector<float>(ch))};
    EXPECT_TRUE(
        Kernel(op::kBatchNormGradInput)(in, absl::MakeSpan(out), a).ok());
    EXPECT_TRUE(
        Kernel(op::kBatchNormGradParams)(pin, absl::MakeSpan(pout), a).ok());
    std::vector<float> r(out[0].data<float>(), out[0].data<float>() + numel);
    r.insert(r.end(), pout[0].data<float>(), pout[0].data<float>() + ch);
    return r;
  };
  const std::vector<float> recomputed = grads(nullptr, attrs);
  const std::vector<float> from_saved = grads(&saved, attrs);
  ASSERT_EQ(recomputed.size(), from_saved.size());
  EXPECT_EQ(0, std::memcmp(recomputed.data(), from_saved.data(),
                           recomputed.size() * 4));
  std::vector<float> shifted = saved;
  shifted[3] += 0.5f;        // channel 3's mean
  shifted[ch + 17] *= 2.0f;  // channel 17's rstd
  const std::vector<float> other = grads(&shifted, attrs);
  auto channel_differs = [&](int64_t c) {
    for (int64_t n = 0; n < 4; ++n) {
      for (int64_t k = 0; k < 36; ++k) {
        const int64_t i = (n * ch + c) * 36 + k;
        if (Bits(other[i]) != Bits(recomputed[i])) return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(channel_differs(3));
  EXPECT_TRUE(channel_differs(17));
  EXPECT_FALSE(channel_differs(4));
  EXPECT_NE(Bits(other[numel + 17]), Bits(recomputed[numel + 17]));
  EXPECT_EQ(Bits(other[numel + 4]), Bits(recomputed[numel + 4]));
  // Eval mode reads the running statistics only.
  OpAttrs eval = attrs;
  eval.batch_norm_eval = true;
  const std::vector<float> eval_plain = grads(nullptr, eval);
  const std::vector<float> eval_shifted = grads(&shifted, eval);
  EXPECT_EQ(0, std::memcmp(eval_plain.data(), eval_shifted.data(),
                           eval_plain.size() * 4));
  // Both gradients in one call: the two calls' results, in training and
  // in eval (the running statistics), and each output its own tensor.
  auto both_in = [&](const std::vector<float>& given, const Tensor& g) {
    return std::vector<Tensor>{T(shape, x), T(shape, dy), T({2, ch}, running),
                               T({2, ch}, given), g};
  };
  auto both_out = [&](const Tensor& dx) {
    return std::vector<Tensor>{T({ch}, std::vector<float>(ch)),
                               T({ch}, std::vector<float>(ch)), dx};
  };
  auto call_both = [&](const std::vector<Tensor>& in, std::vector<Tensor> out,
                       const OpAttrs& a) {
    return Kernel(op::kBatchNormGradParams)(in, absl::MakeSpan(out), a);
  };
  auto both = [&](const std::vector<float>& given, const OpAttrs& a) {
    const std::vector<Tensor> out =
        both_out(T(shape, std::vector<float>(numel)));
    EXPECT_TRUE(call_both(both_in(given, T({ch}, gamma)), out, a).ok());
    std::vector<float> r(out[2].data<float>(), out[2].data<float>() + numel);
    r.insert(r.end(), out[0].data<float>(), out[0].data<float>() + ch);
    return r;
  };
  for (const OpAttrs& a : {attrs, eval}) {
    const std::vector<float> separate = grads(&saved, a);
    const std::vector<float> together = both(saved, a);
    ASSERT_EQ(separate.size(), together.size());
    EXPECT_EQ(
        0, std::memcmp(separate.data(), together.data(), separate.size() * 4))
        << (a.batch_norm_eval ? "eval" : "training");
  }
  const std::vector<float> both_shifted = both(shifted, attrs);
  EXPECT_EQ(0,
            std::memcmp(both_shifted.data(), other.data(), other.size() * 4));
  {
    const absl::Status st =
        call_both(both_in(saved, T({ch + 1}, std::vector<float>(ch + 1))),
                  both_out(T(shape, std::vector<float>(numel))), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("gamma"), std::string::npos) << st;
  }
  {
    const absl::Status st =
        call_both(both_in(saved, T({ch}, gamma)),
                  both_out(T({4, 20, 36}, std::vector<float>(numel))), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("dx"), std::string::npos) << st;
  }
  {
    const Tensor dx = T(shape, std::vector<float>(numel));
    std::vector<Tensor> in = both_in(saved, T({ch}, gamma));
    in[1] = dx;  // dy is dx
    const absl::Status st = call_both(in, both_out(dx), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  }
  {
    std::vector<Tensor> out = both_out(T(shape, std::vector<float>(numel)));
    out.pop_back();  // no dx
    const absl::Status st =
        call_both(both_in(saved, T({ch}, gamma)), out, attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("or 5 and 3 with gamma and dx"),
              std::string::npos)
        << st;
  }
  // Bad saved tensors and arities.
  {
    Tensor in[] = {T(shape, x), T({ch}, gamma), T(shape, dy),
                   T({2, ch}, running), T({ch}, gamma)};
    Tensor out[] = {T(shape, std::vector<float>(numel))};
    const absl::Status st = Kernel(op::kBatchNormGradInput)(
        absl::MakeConstSpan(in), absl::MakeSpan(out), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("batch_norm.grad_input: saved"),
              std::string::npos)
        << st;
  }
  {
    Tensor in[] = {T(shape, x), T(shape, dy), T({2, ch}, running),
                   T({2, ch + 1}, std::vector<float>(2 * ch + 2))};
    Tensor out[] = {T({ch}, std::vector<float>(ch)),
                    T({ch}, std::vector<float>(ch))};
    const absl::Status st = Kernel(op::kBatchNormGradParams)(
        absl::MakeConstSpan(in), absl::MakeSpan(out), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("saved has shape [2, 21], expected [2, 20]"),
              std::string::npos)
        << st;
  }
  {
    Tensor y = T(shape, std::vector<float>(numel));
    Tensor in[] = {T(shape, x), T({ch}, gamma), T({ch}, gamma)};
    Tensor out[] = {y, T({2, ch}, running), y};
    const absl::Status st = Kernel(op::kBatchNormForward)(
        absl::MakeConstSpan(in), absl::MakeSpan(out), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  }
  {
    Tensor in[] = {T(shape, x), T(shape, dy)};
    Tensor out[] = {T({ch}, std::vector<float>(ch)),
                    T({ch}, std::vector<float>(ch))};
    const absl::Status st = Kernel(op::kBatchNormGradParams)(
        absl::MakeConstSpan(in), absl::MakeSpan(out), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("expected 3 inputs and 2 outputs (4 and 2 "
                                "with the saved statistics), got 2 and 2"),
              std::string::npos)
        << st;
  }
}

// layer_norm's row statistics and grad_input reductions run on the same
// lane kernels (rows as the channels of one image): the spec's bits on
// every ISA and thread count, for row counts with tails after blocks of 8
// and 16 and rows shorter than a vector, crossing a chunk, with specials;
// also with the statistics the forward saved.
TEST_F(BatchNormLanesTest, LayerNormGivesTheSpecBitsOnEveryIsaAndThreadCount) {
  const std::vector<std::vector<int64_t>> shapes = {
      {37, 63}, {4, 5, 300}, {2, 16, 128}, {3, 7}, {1, 600}};
  uint32_t seed = 100;
  for (const std::vector<int64_t>& shape : shapes) {
    for (const bool specials : {false, true}) {
      const std::string label =
          absl::StrCat("shape [", absl::StrJoin(shape, ","), "]",
                       specials ? " specials" : "");
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      c::RowShape s;
      s.d = shape.back();
      s.rows = numel / s.d;
      s.epsilon = 1e-5f;
      const std::vector<float> x = RandomFloats(numel, seed++, specials);
      const std::vector<float> dy = RandomFloats(numel, seed++, specials);
      const std::vector<float> gamma = RandomFloats(s.d, seed++, false);
      const std::vector<float> beta = RandomFloats(s.d, seed++, false);
      std::vector<float> want_y(numel), want_dx(numel), want_dg(s.d),
          want_db(s.d);
      std::vector<c::LayerNormRowStats> scratch(s.rows);
      c::LayerNormForward(s, x.data(), gamma.data(), beta.data(),
                          want_y.data());
      c::LayerNormGradInput(s, x.data(), gamma.data(), dy.data(),
                            want_dx.data());
      c::LayerNormGradParams(s, x.data(), dy.data(), scratch.data(),
                             want_dg.data(), want_db.data());
      // The statistics LayerNormGradParams formed, as the forward saves them.
      std::vector<float> want_saved(2 * s.rows);
      for (int64_t r = 0; r < s.rows; ++r) {
        want_saved[r] = scratch[r].mean;
        want_saved[s.rows + r] = scratch[r].rstd;
      }
      OpAttrs attrs;
      attrs.norm_epsilon = s.epsilon;
      for (CpuIsa isa : SupportedCpuIsas()) {
        SetCpuIsaForTesting(isa);
        for (int threads : {1, 2, 3, 8}) {
          SetCpuThreadsForTesting(threads);
          const std::string where = absl::StrCat(
              label, ", isa ", CpuIsaName(isa), ", ", threads, " threads");
          {
            Tensor in[] = {T(shape, x), T({s.d}, gamma), T({s.d}, beta)};
            Tensor out[] = {T(shape, std::vector<float>(numel))};
            ASSERT_TRUE(Kernel(op::kLayerNormForward)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_y, "y, " + where);
          }
          {
            Tensor in[] = {T(shape, x), T({s.d}, gamma), T(shape, dy)};
            Tensor out[] = {T(shape, std::vector<float>(numel))};
            ASSERT_TRUE(Kernel(op::kLayerNormGradInput)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_dx, "dx, " + where);
          }
          {
            Tensor in[] = {T(shape, x), T(shape, dy)};
            Tensor out[] = {T({s.d}, std::vector<float>(s.d)),
                            T({s.d}, std::vector<float>(s.d))};
            ASSERT_TRUE(Kernel(op::kLayerNormGradParams)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_dg, "dgamma, " + where);
            ExpectSameBits(out[1], want_db, "dbeta, " + where);
          }
          // With the saved statistics: the forward writes every row's mean
          // and rstd, and the gradients that take them give the same bits.
          {
            Tensor in[] = {T(shape, x), T({s.d}, gamma), T({s.d}, beta)};
            Tensor out[] = {T(shape, std::vector<float>(numel)),
                            T({2, s.rows}, std::vector<float>(2 * s.rows))};
            ASSERT_TRUE(Kernel(op::kLayerNormForward)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_y, "y with saved, " + where);
            ExpectSameBits(out[1], want_saved, "saved, " + where);
          }
          {
            Tensor in[] = {T(shape, x), T({s.d}, gamma), T(shape, dy),
                           T({2, s.rows}, want_saved)};
            Tensor out[] = {T(shape, std::vector<float>(numel))};
            ASSERT_TRUE(Kernel(op::kLayerNormGradInput)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_dx, "dx from saved, " + where);
          }
          {
            Tensor in[] = {T(shape, x), T(shape, dy),
                           T({2, s.rows}, want_saved)};
            Tensor out[] = {T({s.d}, std::vector<float>(s.d)),
                            T({s.d}, std::vector<float>(s.d))};
            ASSERT_TRUE(Kernel(op::kLayerNormGradParams)(
                            absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                            .ok())
                << where;
            ExpectSameBits(out[0], want_dg, "dgamma from saved, " + where);
            ExpectSameBits(out[1], want_db, "dbeta from saved, " + where);
          }
        }
      }
    }
  }
}

// layer_norm's gradients take the saved row statistics as given (other
// statistics give other rows), and refuse a saved tensor of the wrong
// shape, dtype or arity by name.
TEST_F(BatchNormLanesTest,
       LayerNormGradientsUseTheSavedStatisticsAndCheckThem) {
  const std::vector<int64_t> shape = {6, 40};
  const int64_t rows = 6, d = 40, numel = rows * d;
  const std::vector<float> x = RandomFloats(numel, 71, false);
  const std::vector<float> dy = RandomFloats(numel, 72, false);
  const std::vector<float> gamma = RandomFloats(d, 73, false);
  OpAttrs attrs;
  std::vector<float> saved(2 * rows);
  {
    Tensor in[] = {T(shape, x), T({d}, gamma), T({d}, gamma)};
    Tensor out[] = {T(shape, std::vector<float>(numel)), T({2, rows}, saved)};
    ASSERT_TRUE(Kernel(op::kLayerNormForward)(absl::MakeConstSpan(in),
                                              absl::MakeSpan(out), attrs)
                    .ok());
    std::memcpy(saved.data(), out[1].data<float>(), saved.size() * 4);
  }
  auto dx_of = [&](const std::vector<float>& given) {
    Tensor in[] = {T(shape, x), T({d}, gamma), T(shape, dy),
                   T({2, rows}, given)};
    Tensor out[] = {T(shape, std::vector<float>(numel))};
    EXPECT_TRUE(Kernel(op::kLayerNormGradInput)(absl::MakeConstSpan(in),
                                                absl::MakeSpan(out), attrs)
                    .ok());
    return std::vector<float>(out[0].data<float>(),
                              out[0].data<float>() + numel);
  };
  auto dgamma_of = [&](const std::vector<float>& given) {
    Tensor in[] = {T(shape, x), T(shape, dy), T({2, rows}, given)};
    Tensor out[] = {T({d}, std::vector<float>(d)),
                    T({d}, std::vector<float>(d))};
    EXPECT_TRUE(Kernel(op::kLayerNormGradParams)(absl::MakeConstSpan(in),
                                                 absl::MakeSpan(out), attrs)
                    .ok());
    return std::vector<float>(out[0].data<float>(), out[0].data<float>() + d);
  };
  std::vector<float> shifted = saved;
  shifted[2] += 0.25f;        // row 2's mean
  shifted[rows + 4] *= 2.0f;  // row 4's rstd
  const std::vector<float> dx = dx_of(saved), dx_shifted = dx_of(shifted);
  auto row_differs = [&](int64_t r) {
    for (int64_t j = 0; j < d; ++j) {
      if (Bits(dx[r * d + j]) != Bits(dx_shifted[r * d + j])) return true;
    }
    return false;
  };
  EXPECT_TRUE(row_differs(2));
  EXPECT_TRUE(row_differs(4));
  EXPECT_FALSE(row_differs(0));
  EXPECT_FALSE(row_differs(5));
  const std::vector<float> dg = dgamma_of(saved);
  const std::vector<float> dg_shifted = dgamma_of(shifted);
  EXPECT_NE(0, std::memcmp(dg.data(), dg_shifted.data(), d * 4));
  {
    Tensor in[] = {T(shape, x), T(shape, dy),
                   T({2, rows + 1}, std::vector<float>(2 * rows + 2))};
    Tensor out[] = {T({d}, std::vector<float>(d)),
                    T({d}, std::vector<float>(d))};
    const absl::Status st = Kernel(op::kLayerNormGradParams)(
        absl::MakeConstSpan(in), absl::MakeSpan(out), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("saved has shape [2, 7], expected [2, 6]"),
              std::string::npos)
        << st;
  }
  {
    Tensor in[] = {T(shape, x), T({d}, gamma), T(shape, dy), T({d}, gamma)};
    Tensor out[] = {T(shape, std::vector<float>(numel))};
    const absl::Status st = Kernel(op::kLayerNormGradInput)(
        absl::MakeConstSpan(in), absl::MakeSpan(out), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("layer_norm.grad_input: saved"),
              std::string::npos)
        << st;
  }
  {
    Tensor y = T(shape, std::vector<float>(numel));
    Tensor in[] = {T(shape, x), T({d}, gamma), T({d}, gamma)};
    Tensor out[] = {y, y};
    const absl::Status st = Kernel(op::kLayerNormForward)(
        absl::MakeConstSpan(in), absl::MakeSpan(out), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  }
  {
    Tensor in[] = {T(shape, x)};
    Tensor out[] = {T({d}, std::vector<float>(d)),
                    T({d}, std::vector<float>(d))};
    const absl::Status st = Kernel(op::kLayerNormGradParams)(
        absl::MakeConstSpan(in), absl::MakeSpan(out), attrs);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("expected 2 inputs and 2 outputs (3 and 2 "
                                "with the saved statistics), got 1 and 2"),
              std::string::npos)
        << st;
  }
}

}  // namespace
}  // namespace lockstep::kernels
