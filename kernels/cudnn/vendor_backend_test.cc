// Registration of the vendor kernels and their behaviour before and without
// a device (runs on any machine; the GPU suite is vendor_gpu_test).
#include "kernels/cudnn/vendor_backend.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cudnn/vendor_runtime.h"
#include "kernels/ops/validate.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {
namespace {

bool Contains(const absl::Status& s, const std::string& part) {
  return std::string(s.message()).find(part) != std::string::npos;
}

// Every key RegisterCudaVendorKernels documents, as
// "op/MODE/algorithm/backend".
std::vector<std::string> DocumentedKeys() {
  std::vector<std::string> keys = {
      "dense.forward/DETERMINISTIC/cublas/cuda",
      "dense.grad_input/DETERMINISTIC/cublas/cuda",
      "dense.grad_weight/DETERMINISTIC/cublas/cuda",
      "conv2d.forward/DETERMINISTIC/cudnn/cuda",
      "conv2d.grad_input/DETERMINISTIC/cudnn/cuda",
      "conv2d.grad_weight/DETERMINISTIC/cudnn/cuda",
      "bias_add.grad/DETERMINISTIC/gather/cuda",
      "max_pool2d.grad/DETERMINISTIC/gather/cuda",
      "dense.forward/DEFAULT/cublas/cuda",
      "dense.forward/DEFAULT/split_k_atomic/cuda",
      "dense.forward/DEFAULT/default/cuda",
      "dense.grad_input/DEFAULT/cublas/cuda",
      "dense.grad_input/DEFAULT/default/cuda",
      "dense.grad_weight/DEFAULT/cublas/cuda",
      "dense.grad_weight/DEFAULT/default/cuda",
      "conv2d.forward/DEFAULT/cudnn_find/cuda",
      "conv2d.forward/DEFAULT/default/cuda",
      "conv2d.grad_input/DEFAULT/cudnn_find/cuda",
      "conv2d.grad_input/DEFAULT/default/cuda",
      "conv2d.grad_weight/DEFAULT/cudnn_find/cuda",
      "conv2d.grad_weight/DEFAULT/default/cuda",
      "bias_add.grad/DEFAULT/atomic/cuda",
      "bias_add.grad/DEFAULT/default/cuda",
      "max_pool2d.grad/DEFAULT/atomic/cuda",
      "max_pool2d.grad/DEFAULT/default/cuda",
      "embedding.grad_weight/DEFAULT/atomic/cuda",
      "embedding.grad_weight/DEFAULT/default/cuda",
      "dense.forward/DEFAULT/deterministic/cuda",
      "dense.grad_input/DEFAULT/deterministic/cuda",
      "dense.grad_weight/DEFAULT/deterministic/cuda",
      "conv2d.forward/DEFAULT/deterministic/cuda",
      "conv2d.grad_input/DEFAULT/deterministic/cuda",
      "conv2d.grad_weight/DEFAULT/deterministic/cuda",
      "bias_add.grad/DEFAULT/deterministic/cuda",
      "max_pool2d.grad/DEFAULT/deterministic/cuda",
      "matmul.forward/DETERMINISTIC/cublas/cuda",
      "matmul.grad/DETERMINISTIC/cublas/cuda",
      "matmul.forward/DEFAULT/cublas/cuda",
      "matmul.forward/DEFAULT/split_k_atomic/cuda",
      "matmul.forward/DEFAULT/default/cuda",
      "matmul.grad/DEFAULT/cublas/cuda",
      "matmul.grad/DEFAULT/default/cuda",
      "matmul.forward/DEFAULT/deterministic/cuda",
      "matmul.grad/DEFAULT/deterministic/cuda",
      "conv_transpose2d.forward/DETERMINISTIC/cudnn/cuda",
      "conv_transpose2d.grad_input/DETERMINISTIC/cudnn/cuda",
      "conv_transpose2d.grad_weight/DETERMINISTIC/cudnn/cuda",
      "conv_transpose2d.forward/DEFAULT/cudnn_find/cuda",
      "conv_transpose2d.forward/DEFAULT/default/cuda",
      "conv_transpose2d.grad_input/DEFAULT/cudnn_find/cuda",
      "conv_transpose2d.grad_input/DEFAULT/default/cuda",
      "conv_transpose2d.grad_weight/DEFAULT/cudnn_find/cuda",
      "conv_transpose2d.grad_weight/DEFAULT/default/cuda",
      "conv_transpose2d.forward/DEFAULT/deterministic/cuda",
      "conv_transpose2d.grad_input/DEFAULT/deterministic/cuda",
      "conv_transpose2d.grad_weight/DEFAULT/deterministic/cuda",
  };
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Registers the vendor kernels, or skips the test in a build without CUDA.
#define LS_REGISTER_OR_SKIP(registry)                        \
  do {                                                       \
    if (!RegisterCudaVendorKernels(registry).ok()) {         \
      GTEST_SKIP() << "built without CUDA: nothing to call"; \
    }                                                        \
  } while (false)

TEST(VendorBackendTest, RegistersExactlyTheDocumentedKeysOrReportsNoCuda) {
  Registry registry;
  const absl::Status s = RegisterCudaVendorKernels(&registry);
  if (!vendor::VendorBuiltWithCuda()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_EQ(s.message(), "cudnn backend: built without CUDA");
    EXPECT_EQ(registry.size(), 0u);
    return;
  }
  ASSERT_TRUE(s.ok()) << s;
  std::vector<std::string> got;
  for (const KernelKey& k : registry.Keys()) got.push_back(k.DebugString());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, DocumentedKeys());
  EXPECT_EQ(registry.size(), 56u);
  EXPECT_EQ(RegisterCudaVendorKernels(&registry).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(VendorBackendTest, AlgorithmNamesMatchTheCpuBackendsWhereShared) {
  EXPECT_STREQ(kVendorAtomicAlgorithm, "atomic");
  EXPECT_STREQ(kVendorSplitKAtomicAlgorithm, "split_k_atomic");
  EXPECT_STREQ(kVendorDefaultAlgorithm, "default");
  EXPECT_STREQ(kCublasAlgorithm, "cublas");
  EXPECT_STREQ(kCudnnAlgorithm, "cudnn");
  EXPECT_STREQ(kCudnnFindAlgorithm, "cudnn_find");
  EXPECT_STREQ(kGatherAlgorithm, "gather");
}

// "default" is an alias of one named DEFAULT kernel per op.
TEST(VendorBackendTest, DefaultAliasesTheDocumentedKernel) {
  Registry registry;
  LS_REGISTER_OR_SKIP(&registry);
  const std::pair<const char*, const char*> aliases[] = {
      {op::kDenseForward, kVendorSplitKAtomicAlgorithm},
      {op::kDenseGradInput, kCublasAlgorithm},
      {op::kDenseGradWeight, kCublasAlgorithm},
      {op::kConv2dForward, kCudnnFindAlgorithm},
      {op::kConv2dGradInput, kCudnnFindAlgorithm},
      {op::kConv2dGradWeight, kCudnnFindAlgorithm},
      {op::kBiasAddGrad, kVendorAtomicAlgorithm},
      {op::kMaxPool2dGrad, kVendorAtomicAlgorithm},
      {op::kEmbeddingGradWeight, kVendorAtomicAlgorithm},
      {op::kMatMulForward, kVendorSplitKAtomicAlgorithm},
      {op::kMatMulGrad, kCublasAlgorithm},
  };
  for (const auto& [op_name, algorithm] : aliases) {
    const KernelFn def =
        registry
            .Lookup(KernelKey{op_name, Mode::kDefault, kVendorDefaultAlgorithm,
                              kCudaBackendName})
            .value();
    const KernelFn named = registry
                               .Lookup(KernelKey{op_name, Mode::kDefault,
                                                 algorithm, kCudaBackendName})
                               .value();
    EXPECT_EQ(def, named) << op_name;
  }
}

Tensor Filled(std::vector<int64_t> shape, float start) {
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(shape)).value();
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    p[i] = start + 0.25f * static_cast<float>(i % 7);
  }
  return t;
}

struct Call {
  std::vector<Tensor> in;
  std::vector<Tensor> out;
  OpAttrs attrs;
};

// A valid call of every op the vendor kernels cover; outputs hold 7.0f.
Call ValidCall(const std::string& op) {
  Call c;
  if (op == op::kDenseForward) {
    c.in = {Filled({3, 4}, 1), Filled({4, 2}, -1)};
    c.out = {Filled({3, 2}, 7)};
  } else if (op == op::kDenseGradInput) {
    c.in = {Filled({3, 2}, 1), Filled({4, 2}, -1)};
    c.out = {Filled({3, 4}, 7)};
  } else if (op == op::kDenseGradWeight) {
    c.in = {Filled({3, 4}, 1), Filled({3, 2}, -1)};
    c.out = {Filled({4, 2}, 7)};
  } else if (op == op::kConv2dForward) {
    c.in = {Filled({1, 2, 5, 5}, 1), Filled({3, 2, 3, 3}, -1)};
    c.out = {Filled({1, 3, 5, 5}, 7)};
  } else if (op == op::kConv2dGradInput) {
    c.in = {Filled({1, 3, 5, 5}, 1), Filled({3, 2, 3, 3}, -1)};
    c.out = {Filled({1, 2, 5, 5}, 7)};
  } else if (op == op::kConv2dGradWeight) {
    c.in = {Filled({1, 2, 5, 5}, 1), Filled({1, 3, 5, 5}, -1)};
    c.out = {Filled({3, 2, 3, 3}, 7)};
  } else if (op == op::kConvTranspose2dForward) {
    c.in = {Filled({1, 3, 5, 5}, 1), Filled({3, 2, 3, 3}, -1)};
    c.out = {Filled({1, 2, 5, 5}, 7)};
  } else if (op == op::kConvTranspose2dGradInput) {
    c.in = {Filled({1, 2, 5, 5}, 1), Filled({3, 2, 3, 3}, -1)};
    c.out = {Filled({1, 3, 5, 5}, 7)};
  } else if (op == op::kConvTranspose2dGradWeight) {
    c.in = {Filled({1, 3, 5, 5}, 1), Filled({1, 2, 5, 5}, -1)};
    c.out = {Filled({3, 2, 3, 3}, 7)};
  } else if (op == op::kBiasAddGrad) {
    c.in = {Filled({2, 3, 4}, 1)};
    c.out = {Filled({3}, 7)};
  } else if (op == op::kMaxPool2dGrad) {
    c.in = {Filled({1, 1, 4, 4}, 1), Filled({1, 1, 2, 2}, -1)};
    c.out = {Filled({1, 1, 4, 4}, 7)};
    c.attrs.kernel_h = c.attrs.kernel_w = 2;
    c.attrs.stride_h = c.attrs.stride_w = 2;
  } else if (op == op::kEmbeddingGradWeight) {
    c.in = {Tensor::FromValues<int32_t>({2, 3}, {0, 2, 1, 2, 2, 0}).value(),
            Filled({2, 3, 4}, 1)};
    c.out = {Filled({3, 4}, 7)};
  } else if (op == op::kMatMulForward) {
    c.in = {Filled({2, 3, 4}, 1), Filled({2, 4, 2}, -1)};
    c.out = {Filled({2, 3, 2}, 7)};
    c.attrs.scale = 0.5f;
  } else if (op == op::kMatMulGrad) {
    c.in = {Filled({2, 3, 4}, 1), Filled({2, 4, 2}, -1), Filled({2, 3, 2}, 2)};
    c.out = {Filled({2, 3, 4}, 7), Filled({2, 4, 2}, 7)};
    c.attrs.scale = 0.5f;
  }
  if (op.rfind("conv2d.", 0) == 0 || op.rfind("conv_transpose2d.", 0) == 0) {
    c.attrs.pad_top = c.attrs.pad_bottom = 1;
    c.attrs.pad_left = c.attrs.pad_right = 1;
  }
  return c;
}

std::vector<Tensor> CloneAll(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.Clone().value());
  return out;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.bytes() == b.bytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

// Without a device every kernel fails cleanly (no exit, no crash) with the
// CUDA error and leaves its outputs untouched.
TEST(VendorBackendTest, WithoutADeviceEveryKernelIsFailedPrecondition) {
  Registry registry;
  LS_REGISTER_OR_SKIP(&registry);
  const absl::Status device = cuda::CudaDeviceStatus();
  if (device.ok()) GTEST_SKIP() << "a CUDA device is present";
  for (const KernelKey& key : registry.Keys()) {
    SCOPED_TRACE(key.DebugString());
    Call c = ValidCall(key.op);
    const std::vector<Tensor> before = CloneAll(c.out);
    const KernelFn fn = registry.Lookup(key).value();
    const absl::Status s = fn(c.in, absl::MakeSpan(c.out), c.attrs);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(Contains(s, "no usable CUDA device")) << s;
    EXPECT_TRUE(Contains(s, "cudaGetDeviceCount")) << s;
    for (size_t o = 0; o < c.out.size(); ++o) {
      EXPECT_TRUE(SameBytes(c.out[o], before[o])) << "output " << o;
    }
  }
}

// Bad calls fail with INVALID_ARGUMENT and exactly the message of the
// CANONICAL CUDA kernel, whose validation is the CPU backend's; on a
// machine without a device this also shows no device call came first.
TEST(VendorBackendTest, BadCallsAreInvalidArgumentWithTheSharedMessages) {
  Registry vendor;
  LS_REGISTER_OR_SKIP(&vendor);
  Registry canonical;
  ASSERT_TRUE(RegisterCudaCanonicalKernels(&canonical).ok());
  int checked = 0;
  for (const KernelKey& key : vendor.Keys()) {
    const KernelFn fn = vendor.Lookup(key).value();
    const KernelFn reference =
        canonical
            .Lookup(KernelKey{key.op, Mode::kCanonical, kCanonicalAlgorithm,
                              kCudaBackendName})
            .value();
    std::vector<std::pair<std::string, Call>> bad;
    {
      Call c = ValidCall(key.op);
      Tensor& o = c.out[0];
      std::vector<int64_t> shape = o.shape();
      // (More embedding rows would just be a larger vocabulary.)
      shape[key.op == op::kEmbeddingGradWeight ? 1 : 0] += 1;
      o = Filled(shape, 7);
      bad.emplace_back("output shape", std::move(c));
    }
    {
      Call c = ValidCall(key.op);
      const DType wrong =
          c.in[0].dtype() == DType::kInt32 ? DType::kFloat32 : DType::kInt32;
      c.in[0] = Tensor::Zeros(wrong, c.in[0].shape()).value();
      bad.emplace_back("input dtype", std::move(c));
    }
    {
      Call c = ValidCall(key.op);
      c.in.pop_back();
      bad.emplace_back("arity", std::move(c));
    }
    {
      Call c = ValidCall(key.op);
      if (key.op.rfind("dense.", 0) == 0 || key.op.rfind("matmul.", 0) == 0) {
        c.attrs.transpose_x = true;  // op(x) / op(a) no longer matches
      } else if (key.op.rfind("conv2d.", 0) == 0 ||
                 key.op.rfind("conv_transpose2d.", 0) == 0) {
        c.attrs.stride_h = 0;
      } else if (key.op == op::kMaxPool2dGrad) {
        c.attrs.kernel_h = 0;
      } else if (key.op == op::kEmbeddingGradWeight) {
        c.in[0].data<int32_t>()[4] = 3;  // outside the vocabulary of 3
      } else {
        c.in[0] = Filled({3}, 1);  // bias_add.grad: dy of rank 1
      }
      bad.emplace_back("attributes", std::move(c));
    }
    if (key.op == op::kDenseForward) {
      Call c;
      c.in = {Filled({2, 2}, 1), Filled({2, 2}, 2)};
      c.out = {c.in[0]};  // y shares x's storage
      bad.emplace_back("aliasing", std::move(c));
    }
    for (auto& [what, c] : bad) {
      SCOPED_TRACE(absl::StrFormat("%s, bad %s", key.DebugString(), what));
      const std::vector<Tensor> before = CloneAll(c.out);
      // Both fail before writing, so they may share the outputs (and keep
      // any aliasing the call has).
      const absl::Status want = reference(c.in, absl::MakeSpan(c.out), c.attrs);
      const absl::Status got = fn(c.in, absl::MakeSpan(c.out), c.attrs);
      EXPECT_EQ(got.code(), absl::StatusCode::kInvalidArgument) << got;
      EXPECT_EQ(got, want);
      for (size_t o = 0; o < c.out.size(); ++o) {
        EXPECT_TRUE(SameBytes(c.out[o], before[o]));
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 56 * 4 + 5);  // + aliasing for 5 dense.forward keys
}

// The dense kernels' messages are the shared validator's own.
TEST(VendorBackendTest, DenseMessageIsTheValidatorsMessage) {
  Registry registry;
  LS_REGISTER_OR_SKIP(&registry);
  Call c = ValidCall(op::kDenseForward);
  c.in[1] = Filled({5, 2}, 1);  // inner dimensions differ
  const absl::Status want =
      ValidateDenseForward(c.in[0], c.in[1], c.out[0], c.attrs).status();
  ASSERT_EQ(want.code(), absl::StatusCode::kInvalidArgument);
  for (const char* algorithm :
       {kCublasAlgorithm, kVendorSplitKAtomicAlgorithm}) {
    const KernelFn fn = registry
                            .Lookup(KernelKey{op::kDenseForward, Mode::kDefault,
                                              algorithm, kCudaBackendName})
                            .value();
    EXPECT_EQ(fn(c.in, absl::MakeSpan(c.out), c.attrs), want) << algorithm;
  }
}

// Asymmetric padding is valid (the canonical kernels run it) but legacy
// cuDNN cannot express it: UNIMPLEMENTED naming the attribute, before any
// device work.
TEST(VendorBackendTest, AsymmetricPaddingIsUnimplementedForCudnnKernels) {
  Registry registry;
  LS_REGISTER_OR_SKIP(&registry);
  int checked = 0;
  for (const KernelKey& key : registry.Keys()) {
    if (key.op.rfind("conv2d.", 0) != 0) continue;
    SCOPED_TRACE(key.DebugString());
    Call c = ValidCall(key.op);
    c.attrs.pad_top = 1;
    c.attrs.pad_bottom = 0;  // output height 4 instead of 5
    if (key.op == op::kConv2dForward) c.out[0] = Filled({1, 3, 4, 5}, 7);
    if (key.op == op::kConv2dGradInput) c.in[0] = Filled({1, 3, 4, 5}, 1);
    if (key.op == op::kConv2dGradWeight) c.in[1] = Filled({1, 3, 4, 5}, 1);
    const std::vector<Tensor> before = CloneAll(c.out);
    const absl::Status s =
        registry.Lookup(key).value()(c.in, absl::MakeSpan(c.out), c.attrs);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    EXPECT_TRUE(Contains(s, key.op + " (cudnn)")) << s;
    EXPECT_TRUE(Contains(s, "pad_top = 1, pad_bottom = 0")) << s;
    EXPECT_TRUE(SameBytes(c.out[0], before[0]));
    ++checked;
  }
  EXPECT_EQ(checked, 12);  // cudnn, cudnn_find, default, deterministic
}

// The runtime entry points check their buffers against the shape before
// anything else.
TEST(VendorRuntimeTest, SpansMustMatchTheShape) {
  if (!vendor::VendorBuiltWithCuda()) {
    EXPECT_EQ(
        vendor::CublasMatMul(Mode::kDeterministic, {}, {}, {}, {}).message(),
        "cudnn backend: built without CUDA");
    return;
  }
  canonical::DenseShape d;
  d.m = 2;
  d.k = 3;
  d.n = 4;
  const canonical::MatMulShape s = canonical::DenseForwardShape(d);
  std::vector<float> a(6), b(12), c(7);
  const absl::Status st =
      vendor::CublasMatMul(Mode::kDeterministic, s, a, b, absl::MakeSpan(c));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st, "C holds 7 floats, the shape needs 8")) << st;
  c.resize(8);
  EXPECT_EQ(
      vendor::CublasMatMul(Mode::kCanonical, s, a, b, absl::MakeSpan(c)).code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep::kernels
