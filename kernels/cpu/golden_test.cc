// Golden bit patterns of the CANONICAL CPU kernels.
//
// Pins the fingerprint (docs/fingerprints.md) of the output of a fixed set
// of CANONICAL ops, run through the CPU registry on Philox-seeded inputs, of
// the portable exp/log/tanh over fixed vectors and of Philox uniforms. These
// are the bits that CROSS_CLASS certificates promise: any change that moves
// one of them changes what the spec (docs/canonical-arithmetic.md) defines,
// so it must bump kCanonicalArithmeticVersion (kernels/canonical/version.h),
// update this table and add a changelog entry to the spec.
//
// Shapes are moderate but chosen so that the dense forward (K = 300), dense
// weight gradient (M = 300), bias gradient (N*H*W = 288), conv weight
// gradient (N*OH*OW = 288), global average pooling (H*W = 323), the softmax
// denominator (C = 300) and the bilinear-resize gradient (up to ~1000 terms
// per input pixel) reduce over more than one 256-term chunk.
//
// Regenerate (prints the table in source form instead of comparing):
//   bazel test //kernels/cpu:golden_test --test_output=all
//       --test_env=LOCKSTEP_PRINT_GOLDEN=1     (one command line)
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/canonical/version.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/canonical/float_bits.h"
#include "kernels/math/portable_math.h"
#include "kernels/random/philox.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;
namespace h = ::lockstep::hash;
using ::lockstep::testing::IsOk;

// The canonical-arithmetic version the table below belongs to. A version
// bump fails this assertion on purpose: look at (and regenerate) the table.
constexpr int kGoldenVersion = 1;
static_assert(c::kCanonicalArithmeticVersion == kGoldenVersion,
              "kCanonicalArithmeticVersion changed: regenerate the golden "
              "table in kernels/cpu/golden_test.cc and set kGoldenVersion");

struct Golden {
  const char* name;  // the op, or "math.*" / "philox.*"
  const char* hex;   // fingerprint of the output, docs/fingerprints.md
};

// Canonical arithmetic version 1.
constexpr Golden kGolden[] = {
    {"dense.forward", "e278843a6e7e3944ff03babb3ee63bc9"},
    {"dense.grad_weight", "f6113c564f9e3b017f0301187d2037f5"},
    {"bias_add.grad", "e03efd36fe2f8e6554296453d91a5205"},
    {"conv2d.forward", "a6c9e8048ed6c8c23f0da850bc504b8c"},
    {"conv2d.grad_input", "e36a7a4461d65a6e46f2b2b15f5b2309"},
    {"conv2d.grad_weight", "aa0ed1b369ebf7aa40c461ee23592271"},
    {"max_pool2d.grad", "a72fffbcc677e1944bfd288520da7a9c"},
    {"avg_pool2d.forward", "bbe1323fe4ee3fb2ad66b47ddcca07ea"},
    {"global_avg_pool.forward", "79f667e0b9906c847600db7f5603e2ba"},
    {"resize_bilinear.forward", "dac99962673265e523b98952087d74c0"},
    {"resize_bilinear.grad", "4b98af0d084699c8b2cc6a57185ea3a0"},
    {"softmax_xent.forward", "20eace3743f15d0c962cfaa7c34ace4c"},
    {"softmax_xent.grad", "7dac52266479fdca00e9e9b43e78fbf6"},
    {"adam.update", "337b4b15b63878e1bae4c4216808f7f3"},
    {"math.exp", "b234d3791d330911d364b62fac8b24e4"},
    {"math.log", "179a89f39c914a623fa7208ec3da2780"},
    {"math.tanh", "117480cef329fc914efe2cc0c60d0951"},
    {"philox.uniform", "f11b1d832c42c5ed880ebfad5d58845d"},
};

constexpr char kReminder[] =
    "canonical results changed: if intended, bump kCanonicalArithmeticVersion "
    "(kernels/canonical/version.h), update these golden values and the "
    "changelog in docs/canonical-arithmetic.md";

// Every input is drawn from Philox under this seed; each input tensor has
// its own stream (listed per case).
constexpr uint64_t kSeed = 0x4C4F434B53544550u;  // "LOCKSTEP"

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// PhiloxUniform(kSeed, stream, i, a, b) for i = 0 .. n-1.
std::vector<float> Uniform(uint64_t stream, int64_t n, float a = -1.0f,
                           float b = 1.0f) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = c::PhiloxUniform(kSeed, stream, static_cast<uint64_t>(i), a, b);
  }
  return v;
}

// A float32 tensor of Uniform values in [a, b).
absl::StatusOr<Tensor> Random(std::vector<int64_t> shape, uint64_t stream,
                              float a = -1.0f, float b = 1.0f) {
  const std::vector<float> v = Uniform(stream, NumElements(shape), a, b);
  return Tensor::FromValues<float>(std::move(shape), v);
}

absl::StatusOr<Tensor> Zeros(std::vector<int64_t> shape) {
  return Tensor::Zeros(DType::kFloat32, std::move(shape));
}

absl::StatusOr<Tensor> FromVector(const std::vector<float>& v) {
  return Tensor::FromValues<float>({static_cast<int64_t>(v.size())}, v);
}

// Runs the CANONICAL CPU kernel of `op`.
absl::Status RunOp(const Registry& registry, const std::string& op,
                   std::vector<Tensor> in, std::vector<Tensor> out,
                   const OpAttrs& attrs = {}) {
  LS_ASSIGN_OR_RETURN(KernelFn fn, registry.Lookup(KernelKey{
                                       op, Mode::kCanonical,
                                       kCanonicalAlgorithm, kCpuBackendName}));
  return fn(in, absl::MakeSpan(out), attrs);
}

// Runs a one-output op on fresh inputs and returns the output.
absl::StatusOr<Tensor> RunOne(const Registry& registry, const std::string& op,
                              std::vector<Tensor> in,
                              std::vector<int64_t> out_shape,
                              const OpAttrs& attrs = {}) {
  LS_ASSIGN_OR_RETURN(Tensor out, Zeros(std::move(out_shape)));
  LS_RETURN_IF_ERROR(RunOp(registry, op, std::move(in), {out}, attrs));
  return out;
}

// conv2d: x [4, 3, 17, 15], w [4, 3, 3, 3], stride 2, pad 1:
// y [4, 4, 9, 8], so the weight gradient sums N*OH*OW = 288 terms.
std::vector<int64_t> ConvX() { return {4, 3, 17, 15}; }
std::vector<int64_t> ConvW() { return {4, 3, 3, 3}; }
std::vector<int64_t> ConvY() { return {4, 4, 9, 8}; }
OpAttrs ConvAttrs() {
  OpAttrs a;
  a.stride_h = a.stride_w = 2;
  a.pad_top = a.pad_bottom = a.pad_left = a.pad_right = 1;
  return a;
}

// Pooling: x [2, 3, 9, 7], window 3x3, stride 2, pad 1 (overlapping
// windows, padding at every border): y [2, 3, 5, 4].
std::vector<int64_t> PoolX() { return {2, 3, 9, 7}; }
std::vector<int64_t> PoolY() { return {2, 3, 5, 4}; }
OpAttrs PoolAttrs() {
  OpAttrs a;
  a.kernel_h = a.kernel_w = 3;
  a.stride_h = a.stride_w = 2;
  a.pad_top = a.pad_bottom = a.pad_left = a.pad_right = 1;
  return a;
}

// softmax_xent: logits [6, 300] in [-4, 4), labels from Philox bits.
constexpr int64_t kXentN = 6, kXentC = 300;
absl::StatusOr<std::vector<Tensor>> XentInputs() {
  LS_ASSIGN_OR_RETURN(Tensor logits, Random({kXentN, kXentC}, 120, -4, 4));
  std::vector<int32_t> labels(kXentN);
  for (int64_t i = 0; i < kXentN; ++i) {
    labels[i] = static_cast<int32_t>(c::PhiloxBits(kSeed, 121, i) % kXentC);
  }
  LS_ASSIGN_OR_RETURN(Tensor l, Tensor::FromValues<int32_t>({kXentN}, labels));
  return std::vector<Tensor>{logits, l};
}

// Special inputs appended to every math vector.
std::vector<float> SpecialValues() {
  return {0.0f,
          -0.0f,
          1.0f,
          -1.0f,
          0x1.0p-149f,
          -0x1.0p-149f,
          0x1.fffffcp-127f,
          88.72f,
          -103.9f,
          9.5f,
          c::LsBitsToFloat(0x7F800000u),   // +inf
          c::LsBitsToFloat(0xFF800000u),   // -inf
          c::LsBitsToFloat(0x7FC00000u),   // NaN
          c::LsBitsToFloat(0xFFC00001u)};  // NaN, sign and payload set
}

// 2048 uniform values in [a, b), 2048 random finite bit patterns (both
// signs, subnormals included; `positive` clears the sign), then the
// specials.
std::vector<float> MathInputs(uint64_t stream, float a, float b,
                              bool positive) {
  std::vector<float> v = Uniform(stream, 2048, a, b);
  for (uint64_t i = 0; i < 2048; ++i) {
    uint32_t bits = c::PhiloxBits(kSeed, stream + 1, i);
    const uint32_t sign = positive ? 0u : (bits & 0x80000000u);
    bits = (bits & 0x7FFFFFFFu) % 0x7F800000u;  // finite magnitude
    v.push_back(c::LsBitsToFloat(sign | bits));
  }
  for (float s : SpecialValues()) v.push_back(s);
  return v;
}

absl::StatusOr<Tensor> MathCase(float (*f)(float), uint64_t stream, float a,
                                float b, bool positive) {
  std::vector<float> v = MathInputs(stream, a, b, positive);
  for (float& x : v) x = f(x);
  return FromVector(v);
}

struct Case {
  std::string name;
  std::function<absl::StatusOr<Tensor>(const Registry&)> run;
};

// The pinned computations, in table order. Streams are distinct per input.
std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back(
      {"dense.forward", [](const Registry& r) -> absl::StatusOr<Tensor> {
         // [5, 300] x [300, 7]: K = 300 crosses the 256-term chunk boundary.
         LS_ASSIGN_OR_RETURN(Tensor x, Random({5, 300}, 10));
         LS_ASSIGN_OR_RETURN(Tensor w, Random({300, 7}, 11));
         return RunOne(r, op::kDenseForward, {x, w}, {5, 7});
       }});
  cases.push_back(
      {"dense.grad_weight", [](const Registry& r) -> absl::StatusOr<Tensor> {
         // dw = x^T dy with the batch M = 300 as the reduction.
         LS_ASSIGN_OR_RETURN(Tensor x, Random({300, 6}, 20));
         LS_ASSIGN_OR_RETURN(Tensor dy, Random({300, 5}, 21));
         return RunOne(r, op::kDenseGradWeight, {x, dy}, {6, 5});
       }});
  cases.push_back(
      {"bias_add.grad", [](const Registry& r) -> absl::StatusOr<Tensor> {
         // db[c] sums over (n, h, w): 4 * 9 * 8 = 288 terms.
         LS_ASSIGN_OR_RETURN(Tensor dy, Random({4, 5, 9, 8}, 30));
         return RunOne(r, op::kBiasAddGrad, {dy}, {5});
       }});
  cases.push_back(
      {"conv2d.forward", [](const Registry& r) -> absl::StatusOr<Tensor> {
         LS_ASSIGN_OR_RETURN(Tensor x, Random(ConvX(), 40));
         LS_ASSIGN_OR_RETURN(Tensor w, Random(ConvW(), 41));
         return RunOne(r, op::kConv2dForward, {x, w}, ConvY(), ConvAttrs());
       }});
  cases.push_back(
      {"conv2d.grad_input", [](const Registry& r) -> absl::StatusOr<Tensor> {
         // Stride 2: dx gathers over stride holes and padding.
         LS_ASSIGN_OR_RETURN(Tensor dy, Random(ConvY(), 50));
         LS_ASSIGN_OR_RETURN(Tensor w, Random(ConvW(), 51));
         return RunOne(r, op::kConv2dGradInput, {dy, w}, ConvX(), ConvAttrs());
       }});
  cases.push_back(
      {"conv2d.grad_weight", [](const Registry& r) -> absl::StatusOr<Tensor> {
         LS_ASSIGN_OR_RETURN(Tensor x, Random(ConvX(), 60));
         LS_ASSIGN_OR_RETURN(Tensor dy, Random(ConvY(), 61));
         return RunOne(r, op::kConv2dGradWeight, {x, dy}, ConvW(), ConvAttrs());
       }});
  cases.push_back(
      {"max_pool2d.grad", [](const Registry& r) -> absl::StatusOr<Tensor> {
         LS_ASSIGN_OR_RETURN(Tensor x, Random(PoolX(), 70));
         LS_ASSIGN_OR_RETURN(Tensor dy, Random(PoolY(), 71));
         return RunOne(r, op::kMaxPool2dGrad, {x, dy}, PoolX(), PoolAttrs());
       }});
  cases.push_back(
      {"avg_pool2d.forward", [](const Registry& r) -> absl::StatusOr<Tensor> {
         // Divisor = real taps (3, 4, 6 or 9): non-dyadic divisions.
         LS_ASSIGN_OR_RETURN(Tensor x, Random(PoolX(), 80));
         OpAttrs a = PoolAttrs();
         a.count_include_pad = false;
         return RunOne(r, op::kAvgPool2dForward, {x}, PoolY(), a);
       }});
  cases.push_back({"global_avg_pool.forward",
                   [](const Registry& r) -> absl::StatusOr<Tensor> {
                     // H * W = 323 terms per plane, divided by 323.
                     LS_ASSIGN_OR_RETURN(Tensor x, Random({2, 3, 17, 19}, 90));
                     return RunOne(r, op::kGlobalAvgPoolForward, {x}, {2, 3});
                   }});
  cases.push_back(
      {"resize_bilinear.forward",
       [](const Registry& r) -> absl::StatusOr<Tensor> {
         // 5x7 -> 12x9: non-dyadic scales on both axes.
         LS_ASSIGN_OR_RETURN(Tensor x, Random({2, 3, 5, 7}, 100));
         return RunOne(r, op::kResizeBilinearForward, {x}, {2, 3, 12, 9});
       }});
  cases.push_back(
      {"resize_bilinear.grad", [](const Registry& r) -> absl::StatusOr<Tensor> {
         // dx [3, 2] from dy [40, 37]: hundreds of terms per input pixel.
         LS_ASSIGN_OR_RETURN(Tensor dy, Random({2, 3, 40, 37}, 110));
         return RunOne(r, op::kResizeBilinearGrad, {dy}, {2, 3, 3, 2});
       }});
  cases.push_back(
      {"softmax_xent.forward", [](const Registry& r) -> absl::StatusOr<Tensor> {
         LS_ASSIGN_OR_RETURN(std::vector<Tensor> in, XentInputs());
         return RunOne(r, op::kSoftmaxXentForward, in, {1});
       }});
  cases.push_back(
      {"softmax_xent.grad", [](const Registry& r) -> absl::StatusOr<Tensor> {
         LS_ASSIGN_OR_RETURN(std::vector<Tensor> in, XentInputs());
         return RunOne(r, op::kSoftmaxXentGrad, in, {kXentN, kXentC});
       }});
  cases.push_back(
      {"adam.update", [](const Registry& r) -> absl::StatusOr<Tensor> {
         // One call at step t = 7 with non-zero state; the weight is pinned.
         const int64_t n = 1000;
         LS_ASSIGN_OR_RETURN(Tensor g, Random({n}, 130));
         LS_ASSIGN_OR_RETURN(Tensor w, Random({n}, 131));
         LS_ASSIGN_OR_RETURN(Tensor m, Random({n}, 132, -0.1f, 0.1f));
         LS_ASSIGN_OR_RETURN(Tensor v, Random({n}, 133, 0.0f, 0.01f));
         OpAttrs a;
         a.learning_rate = 1e-3f;
         a.beta1 = 0.9f;
         a.beta2 = 0.999f;
         a.epsilon = 1e-8f;
         a.step = 7;
         LS_RETURN_IF_ERROR(RunOp(r, op::kAdamUpdate, {g}, {w, m, v}, a));
         return w;
       }});
  cases.push_back({"math.exp", [](const Registry&) {
                     // [-110, 95): overflow to +inf, subnormal results,
                     // underflow to +0.
                     return MathCase(&c::CanonicalExp, 200, -110.0f, 95.0f,
                                     false);
                   }});
  cases.push_back({"math.log", [](const Registry&) {
                     // Positive inputs (subnormals included); specials add 0, <
                     // 0, inf, NaN.
                     return MathCase(&c::CanonicalLog, 210, 0.0f, 16.0f, true);
                   }});
  cases.push_back({"math.tanh", [](const Registry&) {
                     // Covers the polynomial (< 1), exp-based (1 .. 9.5) and
                     // saturated parts.
                     return MathCase(&c::CanonicalTanh, 220, -12.0f, 12.0f,
                                     false);
                   }});
  cases.push_back({"philox.uniform", [](const Registry&) {
                     return FromVector(Uniform(230, 4096));
                   }});
  return cases;
}

absl::StatusOr<std::string> FingerprintHex(const Tensor& t) {
  LS_ASSIGN_OR_RETURN(
      h::Fingerprint fp,
      h::HashTensorBytes(h::DtypeCode::kFloat32, t.shape(), t.raw_data(),
                         static_cast<size_t>(t.bytes())));
  return fp.ToHex();
}

bool PrintMode() {
  const char* env = std::getenv("LOCKSTEP_PRINT_GOLDEN");
  return env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0;
}

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(RegisterCpuCanonicalKernels(&registry_), IsOk());
  }
  Registry registry_;
};

TEST_F(GoldenTest, TableMatchesCases) {
  const std::vector<Case> cases = Cases();
  ASSERT_EQ(cases.size(), std::size(kGolden));
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i].name, kGolden[i].name) << "entry " << i;
  }
}

TEST_F(GoldenTest, CanonicalOutputsHavePinnedFingerprints) {
  const std::vector<Case> cases = Cases();
  ASSERT_EQ(cases.size(), std::size(kGolden));
  const bool print = PrintMode();
  std::string table;
  bool any_mismatch = false;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    SCOPED_TRACE(k.name);
    // Twice, on fresh tensors: the same bits run to run.
    absl::StatusOr<Tensor> out = k.run(registry_);
    ASSERT_THAT(out, IsOk());
    absl::StatusOr<Tensor> again = k.run(registry_);
    ASSERT_THAT(again, IsOk());
    absl::StatusOr<std::string> got = FingerprintHex(*out);
    ASSERT_THAT(got, IsOk());
    absl::StatusOr<std::string> got_again = FingerprintHex(*again);
    ASSERT_THAT(got_again, IsOk());
    EXPECT_EQ(*got, *got_again) << k.name << ": two runs differ";

    table += "    {\"" + k.name + "\", \"" + *got + "\"},\n";
    if (print) continue;
    if (*got != kGolden[i].hex) {
      any_mismatch = true;
      ADD_FAILURE() << k.name << ": expected " << kGolden[i].hex << ", got "
                    << *got << " (output " << out->DebugString() << ")";
    }
  }
  if (print) {
    std::cout << "// Canonical arithmetic version "
              << c::kCanonicalArithmeticVersion << ".\n"
              << "constexpr Golden kGolden[] = {\n"
              << table << "};\n";
  }
  if (any_mismatch) ADD_FAILURE() << kReminder;
}

}  // namespace
}  // namespace lockstep::kernels
