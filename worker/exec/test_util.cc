#include "worker/exec/test_util.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/random/philox.h"
#include "model/manifest.h"
#include "model/spec_io.h"

namespace lockstep::worker::testing {

namespace v1 = ::lockstep::v1;

const kernels::Registry& CpuRegistry() {
  static const kernels::Registry* registry = [] {
    auto* r = new kernels::Registry();
    (void)kernels::RegisterCpuCanonicalKernels(r);
    return r;
  }();
  return *registry;
}

BatchSource TeacherBatches(const model::ModelPlan& plan, uint64_t seed) {
  const int64_t n = plan.input_shape[0];
  int64_t features = 1;
  for (size_t i = 1; i < plan.input_shape.size(); ++i) {
    features *= plan.input_shape[i];
  }
  const int classes = plan.num_classes;
  BatchSource src;
  src.digest = "teacher-" + std::to_string(seed);
  src.fill = [=](int step, kernels::Tensor& x,
                 kernels::Tensor& labels) -> absl::Status {
    float* xp = x.data<float>();
    int32_t* lp = labels.data<int32_t>();
    for (int64_t i = 0; i < n * features; ++i) {
      xp[i] = canonical::PhiloxUniform(seed, static_cast<uint64_t>(step),
                                       static_cast<uint64_t>(i), -1.0f, 1.0f);
    }
    for (int64_t r = 0; r < n; ++r) {
      int best = 0;
      double best_v = -1e300;
      for (int c = 0; c < classes; ++c) {
        double v = 0.0;
        for (int64_t f = 0; f < features; ++f) {
          const float w = canonical::PhiloxUniform(
              seed, uint64_t{1} << 40, static_cast<uint64_t>(c * features + f),
              -1.0f, 1.0f);
          v += static_cast<double>(w) * xp[r * features + f];
        }
        if (v > best_v) {
          best_v = v;
          best = c;
        }
      }
      lp[r] = best;
    }
    return absl::OkStatus();
  };
  return src;
}

std::string ZooPath(const std::string& rel) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "lockstep",
                      "/examples/", rel);
}

ZooModel LoadZooModel(const std::string& name, int batch, int steps,
                      const std::string& config_file,
                      const std::string& model_file) {
  ZooModel z;
  auto model = model::ReadModelFile(ZooPath(name + "/" + model_file));
  EXPECT_TRUE(model.ok()) << model.status();
  auto config = model::ReadJobConfigFile(ZooPath(name + "/" + config_file));
  EXPECT_TRUE(config.ok()) << config.status();
  if (!model.ok() || !config.ok()) return z;
  z.model = *model;
  z.config = *config;
  if (batch > 0) z.config.set_batch_size(batch);
  if (steps > 0) z.config.set_steps(steps);
  auto plan = model::PlanModel(z.model, z.config, model::Limits{});
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return z;
  z.plan = *plan;
  std::vector<int64_t> example(z.plan.input_shape.begin() + 1,
                               z.plan.input_shape.end());
  auto ds = OpenDataset(z.config.dataset(), z.config.seed(), example,
                        z.plan.num_classes);
  EXPECT_TRUE(ds.ok()) << ds.status();
  if (ds.ok()) z.dataset = std::shared_ptr<Dataset>(std::move(*ds));
  return z;
}

void ExpectSameFingerprints(const RunResult& got, const RunResult& want) {
  EXPECT_EQ(got.run_digest, want.run_digest);
  ASSERT_EQ(got.fingerprints.size(), want.fingerprints.size());
  for (size_t s = 0; s < want.fingerprints.size(); ++s) {
    ASSERT_EQ(got.fingerprints[s].size(), want.fingerprints[s].size()) << s;
    for (size_t i = 0; i < want.fingerprints[s].size(); ++i) {
      EXPECT_EQ(got.fingerprints[s][i].SerializeAsString(),
                want.fingerprints[s][i].SerializeAsString())
          << "step " << s << " "
          << model::DescribeEntry(want.manifest.entries(static_cast<int>(i)));
    }
  }
}

}  // namespace lockstep::worker::testing
