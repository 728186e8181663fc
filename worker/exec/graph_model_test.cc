// The decomposed LayerNorm + GELU test model
// (testdata/layernorm_gelu_decomposed.model.json): one DENSE output h feeds
// both the fused LAYER_NORM -> GELU and their decomposition as
// torch.onnx.export writes it (ReduceMean, Sub, Pow 2, ReduceMean, Add eps,
// Sqrt, Div, Mul, Add; x * 0.5 * (1 + erf(x / sqrt(2)))), built from BINARY,
// UNARY and REDUCE layers. Until CONSTANT layers exist the constants are
// layer outputs computed exactly from h (mu - mu = 0, exp(0) = 1, 1 + 1 = 2,
// eps = 1 / 2^16), broadcast as [N, T, 1] operands.
//   - Both branches track float64 LayerNorm + GELU of the recorded h (the
//     decomposition with its own eps 2^-16, the fused layers with 1e-5):
//     the decomposition rounds differently, so the comparison is in float64
//     terms, not bits; the measured differences are printed.
//   - The whole model's CANONICAL run digest is the same on every ISA and
//     on 1, 2 and 3 threads.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "model/plan.h"
#include "model/spec_io.h"
#include "worker/exec/executor.h"
#include "worker/exec/test_util.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;

constexpr int64_t kBatch = 4;

std::string TestData(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return std::string(srcdir ? srcdir : ".") + "/" + (ws ? ws : "lockstep") +
         "/worker/exec/testdata/" + name;
}

model::ModelPlan Plan(int steps) {
  auto m =
      model::ReadModelFile(TestData("layernorm_gelu_decomposed.model.json"));
  EXPECT_THAT(m, IsOk());
  auto plan =
      model::PlanModel(*m, testing::BaseConfig(kBatch, steps), model::Limits());
  EXPECT_THAT(plan, IsOk());
  return *plan;
}

TEST(GraphModelTest, DecomposedLayerNormAndGeluTrackTheFusedLayers) {
  const model::ModelPlan plan = Plan(1);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 1);
  std::map<std::string, std::vector<float>> seen;
  ExecutorOptions options;
  options.observer = [&](int step, const v1::ManifestEntry& e,
                         const kernels::Tensor& t,
                         const v1::TensorFingerprint&) -> absl::Status {
    if (step == 0 && e.role() == v1::ACTIVATION) {
      seen[e.layer()] =
          std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
    }
    return absl::OkStatus();
  };
  auto r = RunJob(plan, config, &testing::CpuRegistry(),
                  testing::TeacherBatches(plan, config.seed()), options);
  ASSERT_THAT(r, IsOk());
  // The constants are exact.
  for (float v : seen["one"]) EXPECT_EQ(v, 1.0f);
  for (float v : seen["half"]) EXPECT_EQ(v, 0.5f);
  for (float v : seen["eps"]) EXPECT_EQ(v, std::ldexp(1.0f, -16));
  const std::vector<float>& h = seen["h"];
  ASSERT_EQ(h.size(), static_cast<size_t>(kBatch * 4 * 16));
  // float64 LayerNorm (unit scale, zero shift) and exact GELU per row of 16.
  auto reference = [&](double eps, std::vector<double>* ln,
                       std::vector<double>* gelu) {
    ln->resize(h.size());
    gelu->resize(h.size());
    for (size_t r0 = 0; r0 < h.size(); r0 += 16) {
      double m = 0, v = 0;
      for (int i = 0; i < 16; ++i) m += h[r0 + i];
      m /= 16;
      for (int i = 0; i < 16; ++i) v += (h[r0 + i] - m) * (h[r0 + i] - m);
      v /= 16;
      for (int i = 0; i < 16; ++i) {
        const double y = (h[r0 + i] - m) / std::sqrt(v + eps);
        (*ln)[r0 + i] = y;
        (*gelu)[r0 + i] = 0.5 * y * (1.0 + std::erf(y / std::sqrt(2.0)));
      }
    }
  };
  auto max_diff = [](const std::vector<float>& got,
                     const std::vector<double>& want) {
    EXPECT_EQ(got.size(), want.size());
    double m = 0;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      m = std::max(m, std::fabs(got[i] - want[i]));
    }
    return m;
  };
  std::vector<double> ln_fused, gelu_fused, ln_dec, gelu_dec;
  reference(1e-5, &ln_fused, &gelu_fused);
  reference(std::ldexp(1.0, -16), &ln_dec, &gelu_dec);
  const double d_ln = max_diff(seen["ln_d"], ln_dec);
  const double d_gelu = max_diff(seen["gelu_d"], gelu_dec);
  const double f_ln = max_diff(seen["ln"], ln_fused);
  const double f_gelu = max_diff(seen["gelu"], gelu_fused);
  std::printf(
      "max |float - float64| over %zu elements: decomposed layer norm %.3g, "
      "gelu %.3g; fused layer norm %.3g, gelu %.3g\n",
      h.size(), d_ln, d_gelu, f_ln, f_gelu);
  EXPECT_LT(d_ln, 2e-6);
  EXPECT_LT(d_gelu, 2e-6);
  EXPECT_LT(f_ln, 2e-6);
  EXPECT_LT(f_gelu, 2e-6);
  // And the loss is finite and the same model trains (both branches get
  // gradients through the broadcast operands).
  ASSERT_EQ(r->losses.size(), 1u);
  EXPECT_TRUE(std::isfinite(r->losses[0]));
}

TEST(GraphModelTest, RunDigestDoesNotDependOnIsaOrThreads) {
  const model::ModelPlan plan = Plan(2);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 2);
  std::string reference;
  for (kernels::CpuIsa isa : kernels::SupportedCpuIsas()) {
    for (int threads : {1, 2, 3}) {
      kernels::SetCpuIsaForTesting(isa);
      kernels::SetCpuThreadsForTesting(threads);
      ExecutorOptions options;
      options.keep_fingerprints = false;
      auto r = RunJob(plan, config, &testing::CpuRegistry(),
                      testing::TeacherBatches(plan, config.seed()), options);
      ASSERT_THAT(r, IsOk());
      const std::string digest = r->run_digest.ToHex();
      if (reference.empty()) reference = digest;
      EXPECT_EQ(digest, reference)
          << kernels::CpuIsaName(isa) << ", " << threads << " threads";
    }
  }
  kernels::SetCpuIsaForTesting(std::nullopt);
  kernels::SetCpuThreadsForTesting(0);
}

}  // namespace
}  // namespace lockstep::worker
