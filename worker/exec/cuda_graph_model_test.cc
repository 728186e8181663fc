// Op set v3 models on the CUDA backend, without a GPU:
//   - every kernel of the zoo's graph models (gpt_tiny's tied model,
//     vit_tiny) and of a test model using every graph primitive resolves on
//     the real CUDA registration (RegisterCudaCanonicalKernels) in every
//     mode: Executor::Create succeeds, and DETERMINISTIC and DEFAULT jobs
//     run the CANONICAL CUDA kernel of each graph op as a recorded fallback
//     (there is no vendor kernel for them);
//   - the test model trained on the emulated CUDA backend
//     (kernels/cuda/emulated_backend.h: the CUDA plans and per-thread
//     bodies on the host) gives the CPU's run digest and loss bits.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/emulated_backend.h"
#include "kernels/graph_ops.h"
#include "kernels/registry.h"
#include "model/plan.h"
#include "model/spec_io.h"
#include "model/test_plans.h"
#include "worker/exec/executor.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;

constexpr int64_t kBatch = 3;
constexpr int64_t kT = 4;
constexpr int64_t kVocab = 5;

// Token ids [N, 4] -> every graph primitive: PARAMETER tables, GATHER of
// the ids and of CONSTANT positions, SLICE, CONCAT, MATMUL with an
// unbatched operand, COMPARE against a CONSTANT row, WHERE, UNARY, REDUCE
// MEAN, BINARY with broadcasting (batched against [N, 4, 1] and against an
// unbatched PARAMETER), then the tied logits.
constexpr char kGraphModel[] = R"pb(
  name: "graph_ops"
  input_shape: [ 4 ]
  num_classes: 5
  layers {
    name: "table"
    op: PARAMETER
    parameter { shape: [ 5, 3 ] }
  }
  layers {
    name: "emb"
    op: GATHER
    inputs: [ "table", "<input>" ]
    gather { axis: 0 }
  }
  layers {
    name: "h"
    op: DENSE
    dense { units: 3 use_bias: true last_axis: true }
  }
  layers {
    name: "pos"
    op: CONSTANT
    constant {
      shape: [ 2 ]
      values: [ 0, -3 ]
    }
  }
  layers {
    name: "ends"
    op: GATHER
    inputs: [ "h", "pos" ]
    gather { axis: 1 }
  }
  layers {
    name: "mid"
    op: SLICE
    inputs: [ "h" ]
    slice { axis: 1 start: 2 end: 100 }
  }
  layers {
    name: "cat"
    op: CONCAT
    inputs: [ "ends", "mid" ]
    concat { axis: 1 }
  }
  layers {
    name: "mix"
    op: PARAMETER
    parameter { shape: [ 3, 3 ] }
  }
  layers {
    name: "mixed"
    op: MATMUL
    inputs: [ "cat", "mix" ]
  }
  layers {
    name: "thr"
    op: CONSTANT
    constant {
      shape: [ 3 ]
      values: [ 0, 0.25, -0.25 ]
    }
  }
  layers {
    name: "mask"
    op: COMPARE
    inputs: [ "mixed", "thr" ]
    compare { kind: COMPARE_GREATER }
  }
  layers {
    name: "neg"
    op: UNARY
    inputs: [ "mixed" ]
    unary { kind: UNARY_NEG }
  }
  layers {
    name: "sel"
    op: WHERE
    inputs: [ "mask", "mixed", "neg" ]
  }
  layers {
    name: "mean"
    op: REDUCE
    inputs: [ "sel" ]
    reduce {
      kind: REDUCE_MEAN
      axes: [ -1 ]
      keepdims: true
    }
  }
  layers {
    name: "centered"
    op: BINARY
    inputs: [ "sel", "mean" ]
    binary { kind: BINARY_SUB }
  }
  layers {
    name: "gain"
    op: PARAMETER
    parameter { shape: [ 3 ] }
  }
  layers {
    name: "scaled"
    op: BINARY
    inputs: [ "centered", "gain" ]
    binary { kind: BINARY_MUL }
  }
  layers {
    name: "logits"
    op: MATMUL
    inputs: [ "scaled", "table" ]
    matmul { transpose_b: true }
  }
  layers { name: "loss" op: SOFTMAX_XENT }
)pb";

v1::JobConfig TokenConfig(int steps, v1::Backend backend) {
  v1::JobConfig config = model::testing::BaseConfig(kBatch, steps);
  config.mutable_dataset()->mutable_tokens();
  config.set_backend(backend);
  return config;
}

model::ModelPlan GraphPlan() {
  v1::Model model;
  EXPECT_TRUE(
      google::protobuf::TextFormat::ParseFromString(kGraphModel, &model));
  auto plan = model::PlanModel(model, TokenConfig(1, v1::CPU), model::Limits());
  EXPECT_THAT(plan, IsOk());
  return plan.ok() ? *plan : model::ModelPlan();
}

// ids (n, t, step) -> (3n + 2t + step) mod V, label the next id.
BatchSource TokenBatches() {
  BatchSource b;
  b.digest = "test-tokens";
  b.fill = [](int step, kernels::Tensor& x,
              kernels::Tensor& labels) -> absl::Status {
    int32_t* ids = x.data<int32_t>();
    int32_t* lab = labels.data<int32_t>();
    for (int64_t i = 0; i < kBatch * kT; ++i) {
      const int64_t n = i / kT, t = i % kT;
      ids[i] = static_cast<int32_t>((3 * n + 2 * t + step) % kVocab);
      lab[i] = (ids[i] + 1) % kVocab;
    }
    return absl::OkStatus();
  };
  return b;
}

// Ops of op set v3 (the graph data ops and the broadcasting ops).
std::set<std::string> GraphOps() {
  std::set<std::string> ops;
  for (const std::string& op : kernels::GraphDataOpNames()) ops.insert(op);
  for (const std::string& op : kernels::GraphElementwiseOpNames()) {
    ops.insert(op);
  }
  return ops;
}

std::string ZooPath(const std::string& rel) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "lockstep",
                      "/examples/", rel);
}

TEST(CudaGraphModelTest, EmulatedCudaRunEqualsTheCpuBits) {
  kernels::Registry registry;
  ASSERT_THAT(kernels::RegisterCpuCanonicalKernels(&registry), IsOk());
  ASSERT_THAT(kernels::cuda::RegisterEmulatedCudaKernels(&registry), IsOk());
  const model::ModelPlan plan = GraphPlan();
  auto cpu =
      RunJob(plan, TokenConfig(2, v1::CPU), &registry, TokenBatches(), {});
  auto cuda =
      RunJob(plan, TokenConfig(2, v1::CUDA), &registry, TokenBatches(), {});
  ASSERT_THAT(cpu, IsOk());
  ASSERT_THAT(cuda, IsOk());
  std::set<std::string> graph_ops_run;
  for (const KernelChoice& k : cuda->kernels) {
    EXPECT_EQ(k.ran.backend, "cuda") << k.op;
    if (GraphOps().count(k.op)) graph_ops_run.insert(k.op);
  }
  // Every graph primitive ran, forward and backward.
  EXPECT_EQ(graph_ops_run, GraphOps());
  EXPECT_EQ(cuda->run_digest, cpu->run_digest);
  ASSERT_EQ(cuda->losses.size(), cpu->losses.size());
  for (size_t i = 0; i < cpu->losses.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &cuda->losses[i], 4);
    std::memcpy(&b, &cpu->losses[i], 4);
    EXPECT_EQ(a, b) << "step " << i;
  }
}

struct Named {
  std::string name;
  model::ModelPlan plan;
  v1::JobConfig config;
};

std::vector<Named> GraphModels() {
  std::vector<Named> out = {
      {"graph_ops test model", GraphPlan(), TokenConfig(1, v1::CPU)}};
  for (const char* rel : {"gpt_tiny/model_tied.json", "vit_tiny/model.json"}) {
    const std::string dir =
        std::string(rel).substr(0, std::string(rel).find('/'));
    auto model = model::ReadModelFile(ZooPath(rel));
    auto config = model::ReadJobConfigFile(ZooPath(dir + "/config.json"));
    EXPECT_THAT(model, IsOk());
    EXPECT_THAT(config, IsOk());
    if (!model.ok() || !config.ok()) continue;
    auto plan = model::PlanModel(*model, *config, model::Limits());
    EXPECT_THAT(plan, IsOk());
    if (plan.ok()) out.push_back({rel, *plan, *config});
  }
  return out;
}

// The real CUDA registration (as a worker with a usable device makes it;
// the kernels are resolved, not run): every kernel of every graph model
// resolves on backend "cuda" in every mode.
TEST(CudaGraphModelTest, EveryKernelResolvesOnTheCudaBackendInEveryMode) {
  if (!kernels::cuda::BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  kernels::Registry registry;
  ASSERT_THAT(kernels::RegisterCpuCanonicalKernels(&registry), IsOk());
  ASSERT_THAT(kernels::RegisterCpuDeterministicAndDefaultKernels(&registry),
              IsOk());
  ASSERT_THAT(kernels::RegisterCudaCanonicalKernels(&registry), IsOk());
  for (const Named& m : GraphModels()) {
    for (v1::DeterminismMode mode :
         {v1::CANONICAL, v1::DETERMINISTIC, v1::DEFAULT}) {
      SCOPED_TRACE(absl::StrCat(m.name, ", ", v1::DeterminismMode_Name(mode)));
      v1::JobConfig config = m.config;
      config.set_backend(v1::CUDA);
      config.set_determinism(mode);
      EXPECT_THAT(
          Executor::Create(m.plan, config, &registry, TokenBatches(), {}),
          IsOk());
    }
  }
  // The graph ops: the CANONICAL CUDA kernel in every mode, recorded as a
  // fallback in DETERMINISTIC and DEFAULT (as relu), although the CPU has
  // DEFAULT atomic kernels for gather.grad, binary.grad and where.grad.
  for (const std::string& op : GraphOps()) {
    for (v1::DeterminismMode mode :
         {v1::CANONICAL, v1::DETERMINISTIC, v1::DEFAULT}) {
      SCOPED_TRACE(absl::StrCat(op, ", ", v1::DeterminismMode_Name(mode)));
      v1::JobConfig config = TokenConfig(1, v1::CUDA);
      config.set_determinism(mode);
      auto choice = ChooseKernel(registry, config, op);
      ASSERT_THAT(choice, IsOk());
      EXPECT_EQ(choice->ran.backend, "cuda");
      EXPECT_EQ(choice->ran.mode, kernels::Mode::kCanonical);
      EXPECT_EQ(choice->fallback, mode != v1::CANONICAL);
      EXPECT_EQ(KernelVariant(registry, choice->ran, "avx2"), "cuda/canonical");
    }
  }
  EXPECT_EQ(ChooseKernel(registry, TokenConfig(1, v1::CUDA),
                         kernels::op::kReluForward)
                ->ran.backend,
            "cuda");
}

}  // namespace
}  // namespace lockstep::worker
