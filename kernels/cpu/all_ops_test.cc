// Every CANONICAL CPU kernel, on every ISA path this CPU has and on 1, 2, 3
// and 8 threads, twice (the second time with every output that can be
// written with non-temporal stores written so, StreamOutput in
// lane_kernels.h), against the scalar single-threaded path: identical
// bits, on random inputs and on the exact small-integer family
// (kernels/op_cases.h). And a golden digest per op: the fingerprints of all
// of the op's seeded outputs, pinned (a change means a new canonical
// arithmetic version, docs/canonical-arithmetic.md "Versioning").
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/canonical/version.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/op_cases.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {
namespace {

constexpr uint32_t kSeed = 20261122;

class AllOpsTest : public ::testing::TestWithParam<InputFamily> {
 protected:
  static void SetUpTestSuite() {
    registry_ = new Registry();
    ASSERT_TRUE(RegisterCpuCanonicalKernels(registry_).ok());
  }
  static void TearDownTestSuite() {
    delete registry_;
    registry_ = nullptr;
    SetCpuIsaForTesting(std::nullopt);
    SetCpuThreadsForTesting(0);
  }
  static KernelKey Canonical(const std::string& op) {
    return KernelKey{op, Mode::kCanonical, kCanonicalAlgorithm,
                     kCpuBackendName};
  }
  static Registry* registry_;
};
Registry* AllOpsTest::registry_ = nullptr;

TEST_P(AllOpsTest, EveryIsaAndThreadCountGivesTheScalarBits) {
  const std::vector<OpCase> cases = OpCases(GetParam(), kSeed);
  std::vector<std::vector<Tensor>> want;
  SetCpuIsaForTesting(CpuIsa::kScalar);
  SetCpuThreadsForTesting(1);
  for (const OpCase& c : cases) {
    absl::StatusOr<std::vector<Tensor>> out =
        RunOpCase(*registry_, Canonical(c.op), c);
    ASSERT_TRUE(out.ok()) << c.label << ": " << out.status();
    want.push_back(std::move(*out));
  }
  std::set<std::string> ops;
  for (CpuIsa isa : SupportedCpuIsas()) {
    SetCpuIsaForTesting(isa);
    for (int threads : {1, 2, 3, 8}) {
      SetCpuThreadsForTesting(threads);
      for (int rep = 0; rep < 2; ++rep) {
        cpu_internal::SetStreamOutputFloatsForTesting(rep);
        for (size_t i = 0; i < cases.size(); ++i) {
          const OpCase& c = cases[i];
          ops.insert(c.op);
          absl::StatusOr<std::vector<Tensor>> got =
              RunOpCase(*registry_, Canonical(c.op), c);
          ASSERT_TRUE(got.ok()) << c.label << ": " << got.status();
          ASSERT_EQ(got->size(), want[i].size()) << c.label;
          for (size_t o = 0; o < got->size(); ++o) {
            EXPECT_EQ(FirstDifferingElement((*got)[o], want[i][o]), -1)
                << c.label << " output " << o << ", isa " << CpuIsaName(isa)
                << ", " << threads << " threads, rep " << rep
                << (rep == 1 ? " (outputs streamed)" : "");
          }
        }
      }
    }
  }
  cpu_internal::SetStreamOutputFloatsForTesting(0);
  SetCpuIsaForTesting(std::nullopt);
  SetCpuThreadsForTesting(0);
  std::vector<std::string> all = AllOpNames();
  for (const std::string& op : all) {
    EXPECT_EQ(ops.count(op), 1u) << op << " has no case";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, AllOpsTest,
                         ::testing::Values(InputFamily::kRandom,
                                           InputFamily::kSmallInts),
                         [](const ::testing::TestParamInfo<InputFamily>& i) {
                           return std::string(InputFamilyName(i.param));
                         });

// Per op: CombineDigests of the fingerprints of every output of every case
// of that op (random family, kSeed), in case order. Causal softmax cases
// have their own entries ("softmax.forward causal"), so the plain ones keep
// the digests they had before the option existed.
std::string DigestKey(const OpCase& c) {
  return c.attrs.causal ? c.op + " causal" : c.op;
}
std::map<std::string, std::string> OpDigests(const Registry& registry) {
  std::map<std::string, std::vector<hash::Fingerprint>> per_op;
  for (const OpCase& c : OpCases(InputFamily::kRandom, kSeed)) {
    absl::StatusOr<std::vector<Tensor>> out = RunOpCase(
        registry,
        KernelKey{c.op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName},
        c);
    if (!out.ok()) {
      ADD_FAILURE() << c.label << ": " << out.status();
      continue;
    }
    for (const Tensor& t : *out) {
      if (t.dtype() != DType::kFloat32) continue;
      absl::StatusOr<hash::Fingerprint> f =
          hash::HashTensorBytes(hash::DtypeCode::kFloat32, t.shape(),
                                t.raw_data(), static_cast<size_t>(t.bytes()));
      if (!f.ok()) {
        ADD_FAILURE() << c.label << ": " << f.status();
        continue;
      }
      per_op[DigestKey(c)].push_back(*f);
    }
  }
  std::map<std::string, std::string> digests;
  for (const auto& [op, fps] : per_op) {
    digests[op] = hash::CombineDigests(fps).ToHex();
  }
  return digests;
}

// Regenerate only with a new canonical arithmetic version (or when the
// seeded inputs of kernels/op_cases.cc change): run the test and copy the
// table it prints on failure.
constexpr int kGoldenVersion = 1;
static_assert(canonical::kCanonicalArithmeticVersion == kGoldenVersion,
              "canonical arithmetic changed: regenerate kOpGolden below");

const std::map<std::string, std::string>& OpGolden() {
  static const auto* golden = new std::map<std::string, std::string>{
      {"adam.update", "e5c3b5e9f3d1479aa65d6b9caf7c7be3"},
      {"adamw.update", "6e603d3ca6c6eec8b27834bb50ae5e82"},
      {"add.forward", "e89d0b60717d2b792a50dc88e0f999e1"},
      {"add.grad", "7e8599c808df1777e1115fff0d1aed25"},
      {"avg_pool2d.forward", "e17785595092aa796369fe56ab941354"},
      {"avg_pool2d.grad", "e9c3b9897e8de430700ac754ae012532"},
      {"batch_norm.forward", "8a6ed04d8af02b0e94d58421fbf523d6"},
      {"batch_norm.grad_input", "c8b9d69d46006bdb50797a79bf518212"},
      {"batch_norm.grad_params", "355be995d6763426ddb77951b5637bc3"},
      {"bias_add.forward", "524315950943d3f32200e9cf32f619f4"},
      {"bias_add.grad", "9881234804883bf7af6034e3c1d65af6"},
      {"conv2d.forward", "6e7e270b2fd516b7171e2734768721d3"},
      {"conv2d.grad_input", "50358ad298a6b28e799e14744c93ece8"},
      {"conv2d.grad_weight", "8492ffb62a1cc1bb838b0fa457c7fcd1"},
      {"conv_transpose2d.forward", "94710c02b12324b6e75293d727d71aab"},
      {"conv_transpose2d.grad_input", "94861bda00a16f17244885dd194e6ea0"},
      {"conv_transpose2d.grad_weight", "2c7a51c6f9c1e5c1eff95f5f671bd108"},
      {"dense.forward", "9201ad514630882b512812d2e6feecbf"},
      {"dense.grad_input", "6fe3a7b0fcdfb56c741da09c5098317d"},
      {"dense.grad_weight", "ef422bdfa1ca1a1e2fff0b961c57c85e"},
      {"dropout.forward", "04bdd8bb42a88c97b3f8479863508a33"},
      {"dropout.grad", "114838a8b35e6e9564ca526e4e1464f9"},
      {"embedding.forward", "dd0d798432d9bce75c6e570f3cda82ed"},
      {"embedding.grad_weight", "2480ed551eb96f041d0215254dd6b488"},
      {"flatten", "41acecd7cf53372ad0e22d923ce7db76"},
      {"gelu.forward", "e1efeb6fcb1041d9c19b82289e8aeb09"},
      {"gelu.grad", "2dc979170bbb6bbad28b1161c76866b9"},
      {"gelu_tanh.forward", "20cb6ffd195cf1ef7c57b49fecf2dd51"},
      {"gelu_tanh.grad", "20ae7f5e79714b61b596314614163f7e"},
      {"global_avg_pool.forward", "968921706974697985f3f4d767851398"},
      {"global_avg_pool.grad", "69b87dd6f8eb3be766913598877c4b89"},
      {"grad_norm.scale", "39621b74a6e74b17268558a1a79ed24d"},
      {"grad_norm.sum_squares", "014f72019b493bc8ade0d0402ff3044e"},
      {"layer_norm.forward", "507aabf9d60b0b773a60248edfc84f90"},
      {"layer_norm.grad_input", "08db5c7e4a3803ca4f7f5414463db5bc"},
      {"layer_norm.grad_params", "a1fbd0d3fe62b67e949e95b1bd94bf64"},
      {"matmul.forward", "2138f750cf1f44cccaea310c590423de"},
      {"matmul.grad", "7fd13a1cbae1da679cc75a7da46f1325"},
      {"max_pool2d.forward", "212f1e14b45df5815d9b1f567fa7161a"},
      {"max_pool2d.grad", "5fb66fa867223dc1a4aca4d15d6da8c1"},
      {"momentum.update", "7806e3cf410dc7f4fc7884b6f1c95576"},
      {"relu.forward", "77df6f335cb3dfe6f0bb4cdc6b0b05fe"},
      {"relu.grad", "ca0033a0fdd604939598673ec0737951"},
      {"reshape", "a56620e4fd8dc55f2020fcf32707d251"},
      {"resize_bilinear.forward", "bb72ebc8c5684b05b39a6f9d23d6ac09"},
      {"resize_bilinear.grad", "e434da25ae50d3a10703c5625fdddab8"},
      {"sgd.update", "5fa36a932e9ba76f60b7f81754b50d7f"},
      {"sigmoid.forward", "27f2af0d51e4149ffc773b0bd5aeb033"},
      {"sigmoid.grad", "f1eb9fd762ec3161c00e93aab0257410"},
      {"silu.forward", "2d007d1939c1ddf9012c72847c9c0ef4"},
      {"silu.grad", "52557deedf2f77618609f6cabc857895"},
      {"softmax.forward", "5e5b925abead6ac650c4247166bb8899"},
      {"softmax.forward causal", "a7a25cfd4c6f1c9b93e80516e10fd963"},
      {"softmax.grad", "f0ecd91d892e0d256038994a07315747"},
      {"softmax.grad causal", "ab6e1e4aee36f3766d3acbd25ae3371b"},
      {"softmax_xent.forward", "65f84367de47a3263a3cb79454e9b05c"},
      {"softmax_xent.grad", "0842705c88a436eb6fbed336bb9772ac"},
      {"tanh.forward", "aa3e8b9aee35bbeab6b403716742640d"},
      {"tanh.grad", "d4ee4a11705d4eb53c2a4976321f6c66"},
      {"transpose", "ed8289371a874d62abd405099fc5575c"},
      // Graph primitives with broadcasting (op set v3).
      {"binary.forward", "3729ad6f3d9b091f932cca32d3ca0ce3"},
      {"binary.grad", "6535cad3399a65bdb659b1384e99b547"},
      {"compare", "6374c138af9cfae6ea6e4053943af9e9"},
      {"reduce.forward", "73d3a2ee4a79da549507441aabcce5f0"},
      {"reduce.grad", "0a6954399bd751c54ee655075cf36945"},
      {"unary.forward", "47c784b7e56458ca5be6c4e1e3df9308"},
      {"unary.grad", "3334ef709c9a9ffb8076340d2d13f8e3"},
      {"where.forward", "a5ac545eb6d9bab33372dbb97f65432a"},
      {"where.grad", "29124d232a88b488ee92ce8a170c76e9"},
  };
  return *golden;
}

TEST(AllOpsGoldenTest, EveryOpHasPinnedFingerprints) {
  Registry registry;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&registry).ok());
  const std::map<std::string, std::string> got = OpDigests(registry);
  std::string table;
  for (const auto& [op, hex] : got) {
    table += "      {\"" + op + "\", \"" + hex + "\"},\n";
  }
  EXPECT_EQ(got.size(), AllOpNames().size() + 2);  // + the causal softmax
  EXPECT_EQ(got, OpGolden()) << "current table:\n" << table;
}

}  // namespace
}  // namespace lockstep::kernels
