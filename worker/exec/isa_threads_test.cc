// CANONICAL runs are identical whatever the CPU's vector ISA and thread
// count: every zoo model, trained through the real path (spec files ->
// model::PlanModel -> dataset -> Executor), gives the same run digest with the
// scalar, AVX2 and AVX-512 kernels and on 1, 2 and 3 threads (gpt_tiny,
// the transformer, on a shorter run).
#include <cstdio>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "model/plan.h"
#include "model/spec_io.h"
#include "worker/data/dataset.h"
#include "worker/exec/dataset_batches.h"
#include "worker/exec/executor.h"

namespace lockstep::worker {
namespace {

using ::lockstep::testing::IsOk;

std::string Zoo(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return std::string(srcdir ? srcdir : ".") + "/" + (ws ? ws : "lockstep") +
         "/examples/" + path;
}

// The run digest of `model` trained for `steps` steps with its example
// config (and `batch` examples per step when > 0).
std::string RunDigest(const std::string& model, int steps, int batch = 0) {
  auto m = model::ReadModelFile(Zoo(model + "/model.json"));
  auto c = model::ReadJobConfigFile(Zoo(model + "/config.json"));
  EXPECT_THAT(m, IsOk());
  EXPECT_THAT(c, IsOk());
  c->set_steps(steps);
  if (batch > 0) c->set_batch_size(batch);
  c->clear_capture();
  auto plan = model::PlanModel(*m, *c, model::Limits());
  EXPECT_THAT(plan, IsOk());
  kernels::Registry registry;
  EXPECT_THAT(kernels::RegisterCpuCanonicalKernels(&registry), IsOk());
  std::vector<int64_t> example(plan->input_shape.begin() + 1,
                               plan->input_shape.end());
  auto dataset =
      OpenDataset(c->dataset(), c->seed(), example, plan->num_classes);
  EXPECT_THAT(dataset, IsOk());
  std::shared_ptr<Dataset> shared(std::move(*dataset));
  ExecutorOptions options;
  options.initializer = m->initializer();
  auto exec = Executor::Create(
      *plan, *c, &registry, DatasetBatches(shared, c->batch_size()), options);
  EXPECT_THAT(exec, IsOk());
  for (int s = 0; s < steps; ++s) {
    auto step = (*exec)->RunStep(s);
    EXPECT_THAT(step, IsOk());
  }
  auto result = (*exec)->Finish();
  EXPECT_THAT(result, IsOk());
  return result->run_digest.ToHex();
}

TEST(IsaThreads, CanonicalRunDigestsDoNotDependOnIsaOrThreads) {
  const std::vector<kernels::CpuIsa> isas = {kernels::CpuIsa::kScalar,
                                             kernels::CpuIsa::kAvx2,
                                             kernels::CpuIsa::kAvx512};
  for (const std::string model :
       {"mlp", "lenet5", "resnet_small", "gauntlet", "gpt_tiny"}) {
    // gpt_tiny: 2 steps of 2 sequences (its batched matmuls, transposes,
    // reshapes and causal softmax) keep the scalar runs short.
    const bool gpt = model == "gpt_tiny";
    std::string reference;
    for (kernels::CpuIsa isa : isas) {
      for (int threads : {1, 2, 3}) {
        kernels::SetCpuIsaForTesting(isa);
        kernels::SetCpuThreadsForTesting(threads);
        const std::string digest =
            gpt ? RunDigest(model, 2, 2) : RunDigest(model, 4);
        std::printf(
            "%-13s isa %-7s threads %d  %s\n", model.c_str(),
            std::string(kernels::CpuIsaName(kernels::ActiveCpuIsa())).c_str(),
            threads, digest.c_str());
        if (reference.empty()) reference = digest;
        EXPECT_EQ(digest, reference)
            << model << " with isa " << static_cast<int>(isa) << " and "
            << threads << " threads";
      }
    }
  }
  kernels::SetCpuIsaForTesting(std::nullopt);
}

}  // namespace
}  // namespace lockstep::worker
