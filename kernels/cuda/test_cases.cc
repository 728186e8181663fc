#include "kernels/cuda/test_cases.h"

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/residency.h"

namespace lockstep::kernels::cuda::testing {

absl::StatusOr<std::vector<Tensor>> RunRegistered(const Registry& registry,
                                                  absl::string_view backend,
                                                  const OpCase& c) {
  return RunOpCase(registry,
                   KernelKey{c.op, Mode::kCanonical, kCanonicalAlgorithm,
                             std::string(backend)},
                   c);
}

namespace {

::testing::AssertionResult Compare(const Tensor& got, const Tensor& want,
                                   bool across_classes) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    return ::testing::AssertionFailure()
           << "got " << got.DebugString() << ", want " << want.DebugString();
  }
  const int64_t i = across_classes ? FirstCrossClassDifference(got, want)
                                   : FirstDifferingElement(got, want);
  if (i < 0) return ::testing::AssertionSuccess();
  if (DTypeSize(got.dtype()) != 4) {
    return ::testing::AssertionFailure()
           << absl::StrFormat("first differing element at index 0x%x", i);
  }
  uint32_t a, b;
  std::memcpy(&a, static_cast<const char*>(got.raw_data()) + 4 * i, 4);
  std::memcpy(&b, static_cast<const char*>(want.raw_data()) + 4 * i, 4);
  float fa, fb;
  std::memcpy(&fa, &a, 4);
  std::memcpy(&fb, &b, 4);
  return ::testing::AssertionFailure() << absl::StrFormat(
             "first differing element at index 0x%x: got 0x%08x (%.9g), "
             "want 0x%08x (%.9g)",
             i, a, fa, b, fb);
}

}  // namespace

::testing::AssertionResult SameBits(const Tensor& got, const Tensor& want) {
  return Compare(got, want, /*across_classes=*/false);
}

::testing::AssertionResult SameBitsAcrossClasses(const Tensor& got,
                                                 const Tensor& want) {
  return Compare(got, want, /*across_classes=*/true);
}

namespace {

Tensor FloatTensor(const std::vector<int64_t>& shape, std::mt19937& rng) {
  Tensor t = Tensor::Zeros(DType::kFloat32, shape).value();
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    float x = real(rng);
    if (i % 89 == 3) x = (i % 2 ? -1.0f : 1.0f) * 1.5e-39f;
    if (i % 97 == 5) x = (i % 2 ? -0.0f : 0.0f);
    p[i] = x;
  }
  return t;
}

Tensor ZeroTensor(const std::vector<int64_t>& shape) {
  return Tensor::Zeros(DType::kFloat32, shape).value();
}

}  // namespace

std::vector<TiledProductCase> TiledProductCases(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TiledProductCase> cases;
  struct D {
    int64_t m, k, n;
    bool tx, tw;
    bool tiled;
  };
  for (const D& d :
       {D{70, 600, 33, false, false, true}, D{33, 300, 70, true, true, true},
        D{20, 17, 130, true, false, true},
        D{8, 600, 300, false, true, false}}) {
    OpAttrs a;
    a.transpose_x = d.tx;
    a.transpose_w = d.tw;
    const std::vector<int64_t> xs =
        d.tx ? std::vector<int64_t>{d.k, d.m} : std::vector<int64_t>{d.m, d.k};
    const std::vector<int64_t> ws =
        d.tw ? std::vector<int64_t>{d.n, d.k} : std::vector<int64_t>{d.k, d.n};
    const std::vector<int64_t> ys = {d.m, d.n};
    const std::string label = absl::StrFormat("m=%d k=%d n=%d tx=%d tw=%d", d.m,
                                              d.k, d.n, d.tx, d.tw);
    cases.push_back({{"dense.forward " + label,
                      op::kDenseForward,
                      {FloatTensor(xs, rng), FloatTensor(ws, rng)},
                      {ZeroTensor(ys)},
                      a},
                     d.tiled});
    cases.push_back({{"dense.grad_input " + label,
                      op::kDenseGradInput,
                      {FloatTensor(ys, rng), FloatTensor(ws, rng)},
                      {ZeroTensor(xs)},
                      a},
                     d.tiled});
    cases.push_back({{"dense.grad_weight " + label,
                      op::kDenseGradWeight,
                      {FloatTensor(xs, rng), FloatTensor(ys, rng)},
                      {ZeroTensor(ws)},
                      a},
                     d.tiled});
  }
  {
    OpAttrs a;
    a.transpose_w = true;
    a.scale = 0.125f;
    const std::vector<int64_t> as = {3, 40, 300}, bs = {3, 20, 300},
                               ys = {3, 40, 20};
    cases.push_back({{"matmul.forward batch=3 m=40 k=300 n=20 tb=1",
                      op::kMatMulForward,
                      {FloatTensor(as, rng), FloatTensor(bs, rng)},
                      {ZeroTensor(ys)},
                      a},
                     true});
    cases.push_back(
        {{"matmul.grad batch=3 m=40 k=300 n=20 tb=1",
          op::kMatMulGrad,
          {FloatTensor(as, rng), FloatTensor(bs, rng), FloatTensor(ys, rng)},
          {ZeroTensor(as), ZeroTensor(bs)},
          a},
         true});
  }
  // Each geometry's six directions: conv2d forward / grad_input /
  // grad_weight and the conv_transpose2d directions that run them
  // (conv_transpose2d.grad_input runs the forward, .forward the grad_input,
  // .grad_weight the grad_weight with the operands swapped). The products:
  // forward (H_out W_out x C_in KH KW x C_out per image), grad_input (H W x
  // C_out KH KW x C_in per image), grad_weight (C_out x N H_out W_out x
  // C_in KH KW); each is tiled when all three are >= 16 and groups == 1.
  struct C {
    std::vector<int64_t> x, w, y;
    int64_t stride, dilation, pad_top, pad_bottom, pad_left, pad_right, groups;
    bool tiled_forward, tiled_grad_input, tiled_grad_weight;
  };
  const C convs[] = {
      // grad_weight: 162 terms (one chunk); grad_input has 3 channels.
      {{2, 3, 9, 9},
       {16, 3, 3, 3},
       {2, 16, 9, 9},
       1,
       1,
       1,
       1,
       1,
       1,
       1,
       true,
       false,
       true},
      // stride 2, dilation 2, asymmetric padding; grad_weight: 30 terms.
      {{1, 40, 12, 11},
       {17, 40, 3, 3},
       {1, 17, 6, 5},
       2,
       2,
       2,
       1,
       1,
       2,
       1,
       true,
       true,
       true},
      // grouped: never lowered.
      {{2, 4, 8, 8},
       {16, 2, 3, 3},
       {2, 16, 6, 6},
       1,
       1,
       0,
       0,
       0,
       0,
       2,
       false,
       false,
       false},
      // too small to tile.
      {{1, 2, 4, 4},
       {16, 2, 3, 3},
       {1, 16, 2, 2},
       1,
       1,
       0,
       0,
       0,
       0,
       1,
       false,
       false,
       false},
      // grad_input: 288 taps (two chunks); grad_weight: 286 terms (two
      // chunks, the second of 30).
      {{2, 16, 13, 11},
       {32, 16, 3, 3},
       {2, 32, 13, 11},
       1,
       1,
       1,
       1,
       1,
       1,
       1,
       true,
       true,
       true},
      // 5 x 5, stride 2, asymmetric padding; grad_weight: 900 terms (four
      // chunks, the last of 132).
      {{4, 3, 30, 30},
       {16, 3, 5, 5},
       {4, 16, 15, 15},
       2,
       1,
       1,
       2,
       2,
       1,
       1,
       true,
       false,
       true},
      // 1 x 1, stride 2: grad_input's taps fall on stride holes.
      {{2, 24, 10, 10},
       {20, 24, 1, 1},
       {2, 20, 5, 5},
       2,
       1,
       0,
       0,
       0,
       0,
       1,
       true,
       true,
       true},
      // grad_weight: 512 terms (exactly two chunks).
      {{2, 3, 16, 16},
       {16, 3, 3, 3},
       {2, 16, 16, 16},
       1,
       1,
       1,
       1,
       1,
       1,
       1,
       true,
       false,
       true},
      // grad_weight: 1197 terms (five chunks, the last of 173).
      {{3, 4, 21, 19},
       {16, 4, 3, 3},
       {3, 16, 21, 19},
       1,
       1,
       1,
       1,
       1,
       1,
       1,
       true,
       false,
       true},
  };
  for (const C& v : convs) {
    OpAttrs a;
    a.stride_h = a.stride_w = v.stride;
    a.dilation_h = a.dilation_w = v.dilation;
    a.pad_top = v.pad_top;
    a.pad_bottom = v.pad_bottom;
    a.pad_left = v.pad_left;
    a.pad_right = v.pad_right;
    a.groups = v.groups;
    struct Direction {
      const char* op;
      std::vector<int64_t> in0, in1, out;
      bool tiled;
    };
    const Direction directions[] = {
        {op::kConv2dForward, v.x, v.w, v.y, v.tiled_forward},
        {op::kConvTranspose2dGradInput, v.x, v.w, v.y, v.tiled_forward},
        {op::kConv2dGradInput, v.y, v.w, v.x, v.tiled_grad_input},
        {op::kConvTranspose2dForward, v.y, v.w, v.x, v.tiled_grad_input},
        {op::kConv2dGradWeight, v.x, v.y, v.w, v.tiled_grad_weight},
        {op::kConvTranspose2dGradWeight, v.y, v.x, v.w, v.tiled_grad_weight},
    };
    for (const Direction& d : directions) {
      cases.push_back(
          {{absl::StrFormat("%s x=%s w=%s stride=%d dilation=%d groups=%d",
                            d.op, ShapeString(v.x), ShapeString(v.w), v.stride,
                            v.dilation, v.groups),
            d.op,
            {FloatTensor(d.in0, rng), FloatTensor(d.in1, rng)},
            {ZeroTensor(d.out)},
            a},
           d.tiled});
    }
  }
  return cases;
}

::testing::AssertionResult QueuedFingerprintsMatchHost(
    const Registry& registry, absl::string_view backend) {
  const absl::StatusOr<KernelFn> relu =
      registry.Lookup(KernelKey{"relu.forward", Mode::kCanonical,
                                kCanonicalAlgorithm, std::string(backend)});
  if (!relu.ok()) return ::testing::AssertionFailure() << relu.status();
  // Inputs of both signs, a NaN and an infinity among them.
  auto input = [](int64_t n, uint32_t seed) {
    std::vector<float> v(static_cast<size_t>(n));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (float& x : v) x = u(rng);
    v[1] = std::numeric_limits<float>::quiet_NaN();
    if (n > 3) v[3] = std::numeric_limits<float>::infinity();
    return Tensor::FromValues<float>({n}, v);
  };
  const int64_t big = (int64_t{1} << 18) + 3;  // 1 MiB + 12 bytes
  absl::StatusOr<Tensor> x1 = input(big, 1), x2 = input(big, 2),
                         x3 = input(4, 3);
  absl::StatusOr<Tensor> y = Tensor::Zeros(DType::kFloat32, {big});
  absl::StatusOr<Tensor> small = Tensor::Zeros(DType::kFloat32, {4});
  if (!x1.ok() || !x2.ok() || !x3.ok() || !y.ok() || !small.ok()) {
    return ::testing::AssertionFailure() << "tensors not made";
  }
  auto fingerprint = [](const Tensor& t) {
    return hash::FingerprintAndStats(hash::DtypeCode::kFloat32, t.shape(),
                                     t.raw_data(),
                                     static_cast<size_t>(t.bytes()));
  };
  // Call i: relu of inputs[i] into outputs[i] (y twice, then the small one).
  const Tensor* inputs[] = {&*x1, &*x2, &*x3};
  const Tensor* outputs[] = {&*y, &*y, &*small};
  // The host's fingerprints of what each queued fingerprint must see.
  std::vector<hash::FingerprintAndStatsResult> want;
  for (size_t i = 0; i < 3; ++i) {
    const Tensor* x = inputs[i];
    absl::StatusOr<Tensor> out = outputs[i]->Clone();
    if (!out.ok()) return ::testing::AssertionFailure() << out.status();
    std::vector<Tensor> outs = {*out};
    if (absl::Status s = (*relu)({*x}, absl::MakeSpan(outs), OpAttrs{});
        !s.ok()) {
      return ::testing::AssertionFailure() << s;
    }
    absl::StatusOr<hash::FingerprintAndStatsResult> f = fingerprint(outs[0]);
    if (!f.ok()) return ::testing::AssertionFailure() << f.status();
    want.push_back(*f);
  }
  if (CollectQueuedFingerprints().status().code() !=
      absl::StatusCode::kFailedPrecondition) {
    return ::testing::AssertionFailure()
           << "collecting outside a resident run did not fail";
  }
  ResidencyCounters counters;
  std::vector<hash::FingerprintAndStatsResult> got, again;
  {
    ScopedResidentRun scope(&counters);
    for (size_t i = 0; i < 3; ++i) {
      std::vector<Tensor> outs = {*outputs[i]};
      if (absl::Status s =
              (*relu)({*inputs[i]}, absl::MakeSpan(outs), OpAttrs{});
          !s.ok()) {
        return ::testing::AssertionFailure() << s;
      }
      ResidentMirror* m = NewerResidentMirror(outs[0]);
      if (m == nullptr) {
        return ::testing::AssertionFailure()
               << "relu's output is not newer in its mirror";
      }
      absl::StatusOr<size_t> position = m->QueueFingerprintAndStats(
          hash::DtypeCode::kFloat32, outs[0].shape(),
          static_cast<size_t>(outs[0].bytes()));
      if (!position.ok()) {
        return ::testing::AssertionFailure() << position.status();
      }
      if (*position != i) {
        return ::testing::AssertionFailure() << "queued at " << *position;
      }
    }
    absl::StatusOr<std::vector<hash::FingerprintAndStatsResult>> r =
        CollectQueuedFingerprints();
    if (!r.ok()) return ::testing::AssertionFailure() << r.status();
    got = *r;
    r = CollectQueuedFingerprints();
    if (!r.ok()) return ::testing::AssertionFailure() << r.status();
    again = *r;
  }
  if (got.size() != want.size() || !again.empty()) {
    return ::testing::AssertionFailure()
           << got.size() << " results collected, then " << again.size()
           << "; want 3, then 0";
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const hash::FingerprintAndStatsResult& a = got[i];
    const hash::FingerprintAndStatsResult& b = want[i];
    auto bits = [](double d) {
      uint64_t u;
      std::memcpy(&u, &d, 8);
      return u;
    };
    if (a.fingerprint.hi != b.fingerprint.hi ||
        a.fingerprint.lo != b.fingerprint.lo ||
        bits(a.stats.sum) != bits(b.stats.sum) ||
        bits(a.stats.l2) != bits(b.stats.l2) ||
        bits(a.stats.max_abs) != bits(b.stats.max_abs) ||
        a.stats.nan_count != b.stats.nan_count ||
        a.stats.inf_count != b.stats.inf_count) {
      return ::testing::AssertionFailure() << absl::StrFormat(
                 "queued fingerprint %d: %016x%016x, host %016x%016x", i,
                 a.fingerprint.hi, a.fingerprint.lo, b.fingerprint.hi,
                 b.fingerprint.lo);
    }
  }
  if (counters.queued_fingerprints != 3 ||
      counters.fingerprint_collections != 2) {
    return ::testing::AssertionFailure()
           << counters.queued_fingerprints << " queued, "
           << counters.fingerprint_collections << " collections";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace lockstep::kernels::cuda::testing
