// CANONICAL CPU kernels of the dense family, the loss and the optimizers.
// The dense kernels here are the scalar ones (registered as "scalar"); the
// "canonical" dense kernels are the GEMM ones of fast_kernels.cc.
// bias_add.grad runs on the lane kernels (lane_kernels.h) as "canonical" and
// on the scalar body as "scalar".
#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/dense.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/optimizers.h"
#include "kernels/ops/softmax_xent.h"
#include "kernels/ops/validate.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

void FillZero(Tensor& t) {
  if (t.bytes() > 0) std::memset(t.raw_data(), 0, t.bytes());
}

absl::Status DenseForwardKernel(absl::Span<const Tensor> in,
                                absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kDenseForward, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::DenseShape d,
                      ValidateDenseForward(in[0], in[1], out[0], a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kDenseForward, in, out));
  if (d.k == 0) {  // empty reduction: +0.0f (and no pointer arithmetic)
    FillZero(out[0]);
    return absl::OkStatus();
  }
  c::DenseForward(d, in[0].data<float>(), in[1].data<float>(),
                  out[0].data<float>());
  return absl::OkStatus();
}

absl::Status DenseGradInputKernel(absl::Span<const Tensor> in,
                                  absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kDenseGradInput, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::DenseShape d,
                      ValidateDenseGradInput(in[0], in[1], out[0], a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kDenseGradInput, in, out));
  if (d.n == 0) {
    FillZero(out[0]);
    return absl::OkStatus();
  }
  c::DenseGradInput(d, in[0].data<float>(), in[1].data<float>(),
                    out[0].data<float>());
  return absl::OkStatus();
}

absl::Status DenseGradWeightKernel(absl::Span<const Tensor> in,
                                   absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kDenseGradWeight, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::DenseShape d,
                      ValidateDenseGradWeight(in[0], in[1], out[0], a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kDenseGradWeight, in, out));
  if (d.m == 0) {
    FillZero(out[0]);
    return absl::OkStatus();
  }
  c::DenseGradWeight(d, in[0].data<float>(), in[1].data<float>(),
                     out[0].data<float>());
  return absl::OkStatus();
}

// Elements per task of the elementwise kernels (bias_add.forward, relu):
// independent outputs, so any split gives the same bits.
constexpr int64_t kElementwiseBlock = 32768;

// Rows of `width` elements per task of the row-wise kernels.
int64_t RowsPerTask(int64_t width) {
  return std::max<int64_t>(1, kElementwiseBlock / std::max<int64_t>(1, width));
}

absl::Status BiasAddForwardKernel(absl::Span<const Tensor> in,
                                  absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kBiasAddForward, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::BiasShape s, ValidateBiasAdd(in[0], in[1], out[0]));
  if (out[0].SharesStorageWith(in[1])) {
    return absl::InvalidArgumentError(
        "bias_add.forward: y must not share storage with b");
  }
  // y may alias x: each element is read once, then written. Rows of one
  // (n, c) plane at a time: c::BiasAddElement's x + b[c] without its
  // per-element division.
  const float* x = in[0].data<float>();
  const float* b = in[1].data<float>();
  float* y = out[0].data<float>();
  if (s.n * s.c * s.spatial == 0) return absl::OkStatus();
  if (s.spatial == 1) {
    // [n, c] rows: b added along each row.
    ParallelForBlocks(CpuThreadPool(), s.n, RowsPerTask(s.c),
                      [&](int64_t r0, int64_t r1) {
                        for (int64_t r = r0; r < r1; ++r) {
                          const float* xr = x + r * s.c;
                          float* yr = y + r * s.c;
                          for (int64_t j = 0; j < s.c; ++j)
                            yr[j] = xr[j] + b[j];
                        }
                      });
    return absl::OkStatus();
  }
  const int64_t planes = s.n * s.c;
  const int64_t block = std::max<int64_t>(1, kElementwiseBlock / s.spatial);
  ParallelForBlocks(CpuThreadPool(), planes, block,
                    [&](int64_t p0, int64_t p1) {
                      for (int64_t p = p0; p < p1; ++p) {
                        const float bias = b[p % s.c];
                        const float* xp = x + p * s.spatial;
                        float* yp = y + p * s.spatial;
                        for (int64_t k = 0; k < s.spatial; ++k)
                          yp[k] = xp[k] + bias;
                      }
                    });
  return absl::OkStatus();
}

// kLanes: the lane kernels (lane_kernels.h); else the scalar spec body.
// Same bits either way.
template <bool kLanes>
absl::Status BiasAddGradKernel(absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kBiasAddGrad, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(c::BiasShape s, ValidateBiasAddGrad(in[0], out[0]));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kBiasAddGrad, in, out));
  if (in[0].numel() == 0) {
    FillZero(out[0]);
    return absl::OkStatus();
  }
  if (kLanes) {
    BiasAddGradLanes(s, in[0].data<float>(), out[0].data<float>(),
                     ActiveCpuIsa(), CpuThreadPool());
  } else {
    c::BiasAddGrad(s, in[0].data<float>(), out[0].data<float>());
  }
  return absl::OkStatus();
}

absl::Status ReluForwardKernel(absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kReluForward, in, 1, out, 1));
  const Tensor* t[] = {&in[0], &out[0]};
  const absl::string_view names[] = {"x", "y"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op::kReluForward, t, names));
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  // The spec's loop on the lane kernels' vectors (the same bits); a large
  // y written past the caches (kStreamOutputFloats).
  const CpuIsa isa = ActiveCpuIsa();
  const bool stream = StreamOutput(in[0].numel(), y, x, nullptr);
  ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementwiseBlock,
                    [&](int64_t b, int64_t e) {
                      ReluLanes(x + b, y + b, e - b, isa, stream);
                    });
  return absl::OkStatus();
}

absl::Status ReluGradKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                            const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kReluGrad, in, 2, out, 1));
  const Tensor* t[] = {&in[0], &in[1], &out[0]};
  const absl::string_view names[] = {"x", "dy", "dx"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op::kReluGrad, t, names));
  const float* x = in[0].data<float>();
  const float* dy = in[1].data<float>();
  float* dx = out[0].data<float>();
  const CpuIsa isa = ActiveCpuIsa();
  const bool stream = StreamOutput(in[0].numel(), dx, x, dy);
  ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementwiseBlock,
                    [&](int64_t b, int64_t e) {
                      ReluGradLanes(x + b, dy + b, dx + b, e - b, isa, stream);
                    });
  return absl::OkStatus();
}

absl::Status FlattenKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                           const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kFlatten, in, 1, out, 1));
  LS_RETURN_IF_ERROR(ValidateFlatten(in[0], out[0]));
  if (in[0].bytes() > 0 && out[0].raw_data() != in[0].raw_data()) {
    std::memmove(out[0].raw_data(), in[0].raw_data(), in[0].bytes());
  }
  return absl::OkStatus();
}

// y = a + b (AddForward's operation, operands in its order), y written with
// non-temporal stores where 16-byte aligned (StreamOutput); fenced.
void AddForwardStreamed(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__SSE__)
  for (; i < n && reinterpret_cast<uintptr_t>(y + i) % 16 != 0; ++i) {
    y[i] = a[i] + b[i];
  }
  for (; i + 4 <= n; i += 4) {
    _mm_stream_ps(y + i, _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
  }
#endif
  c::AddForward(a + i, b + i, y + i, n - i);
#if defined(__SSE__)
  _mm_sfence();
#endif
}

absl::Status AddForwardKernel(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kAddForward, in, 2, out, 1));
  const Tensor* t[] = {&in[0], &in[1], &out[0]};
  const absl::string_view names[] = {"a", "b", "y"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op::kAddForward, t, names));
  const float* a = in[0].data<float>();
  const float* b = in[1].data<float>();
  float* y = out[0].data<float>();
  // A large y (residual sums, gradient accumulation) past the caches.
  const bool stream = StreamOutput(in[0].numel(), y, a, b);
  ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementwiseBlock,
                    [&](int64_t i, int64_t e) {
                      if (stream) {
                        AddForwardStreamed(a + i, b + i, y + i, e - i);
                      } else {
                        c::AddForward(a + i, b + i, y + i, e - i);
                      }
                    });
  return absl::OkStatus();
}

absl::Status AddGradKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                           const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kAddGrad, in, 1, out, 2));
  const Tensor* t[] = {&in[0], &out[0], &out[1]};
  const absl::string_view names[] = {"dy", "da", "db"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op::kAddGrad, t, names));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kAddGrad, in, out));
  const float* dy = in[0].data<float>();
  float* da = out[0].data<float>();
  float* db = out[1].SharesStorageWith(out[0]) ? nullptr : out[1].data<float>();
  ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementwiseBlock,
                    [&](int64_t i, int64_t e) {
                      std::memcpy(da + i, dy + i, (e - i) * sizeof(float));
                      if (db != nullptr) {
                        std::memcpy(db + i, dy + i, (e - i) * sizeof(float));
                      }
                    });
  return absl::OkStatus();
}

absl::Status SoftmaxXentForwardKernel(absl::Span<const Tensor> in,
                                      absl::Span<Tensor> out, const OpAttrs&) {
  const absl::string_view name = op::kSoftmaxXentForward;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::SoftmaxShape s,
                      ValidateSoftmaxXent(name, in[0], in[1]));
  if (out[0].dtype() != DType::kFloat32 || out[0].numel() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: loss must be float32 with one element ([] or [1]), got %s", name,
        out[0].DebugString()));
  }
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  // The per-example losses on the pool (independent rows), then their
  // canonical mean: c::SoftmaxXentForward's bits.
  const float* logits = in[0].data<float>();
  const int32_t* labels = in[1].data<int32_t>();
  std::vector<float> losses(s.n);
  const CpuIsa isa = ActiveCpuIsa();
  {
    // Every row's max and sum with lanes = rows (SoftmaxRowExpsOnce's
    // bits), then each loss from them.
    ScratchFloats exps(s.n * s.c);
    std::vector<float> max(s.n), sum(s.n);
    if (SoftmaxRowStatsLanes(logits, exps.data(), max.data(), sum.data(), s.n,
                             s.c, isa, CpuThreadPool())) {
      for (int64_t i = 0; i < s.n; ++i) {
        losses[i] = c::SoftmaxXentLossFrom(logits + i * s.c, labels[i],
                                           c::SoftmaxRowStats{max[i], sum[i]});
      }
      out[0].data<float>()[0] = c::SoftmaxXentMeanLoss(s, losses.data());
      return absl::OkStatus();
    }
  }
  // The rows' exps on the lane kernels' vector exp (CanonicalExp's bits).
  const auto exp_row = [isa](float* v, int64_t n) {
    CanonicalExpLanes(v, v, n, isa);
  };
  ParallelForBlocks(CpuThreadPool(), s.n, RowsPerTask(s.c),
                    [&](int64_t b, int64_t e) {
                      std::vector<float> scratch(s.c);
                      for (int64_t i = b; i < e; ++i) {
                        losses[i] = c::SoftmaxXentExampleLossOnce(
                            s, logits, labels, i, scratch.data(), exp_row);
                      }
                    });
  out[0].data<float>()[0] = c::SoftmaxXentMeanLoss(s, losses.data());
  return absl::OkStatus();
}

absl::Status SoftmaxXentGradKernel(absl::Span<const Tensor> in,
                                   absl::Span<Tensor> out, const OpAttrs&) {
  const absl::string_view name = op::kSoftmaxXentGrad;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::SoftmaxShape s,
                      ValidateSoftmaxXent(name, in[0], in[1]));
  const Tensor* t[] = {&in[0], &out[0]};
  const absl::string_view names[] = {"logits", "dlogits"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(name, t, names));
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  const float* logits = in[0].data<float>();
  const int32_t* labels = in[1].data<int32_t>();
  float* dlogits = out[0].data<float>();
  const CpuIsa isa = ActiveCpuIsa();
  {
    // Every row's exps (into dlogits), max and sum with lanes = rows
    // (SoftmaxRowExpsOnce's bits), then SoftmaxXentGradRowOnce's outputs.
    std::vector<float> max(s.n), sum(s.n);
    if (SoftmaxRowStatsLanes(logits, dlogits, max.data(), sum.data(), s.n, s.c,
                             isa, CpuThreadPool())) {
      ParallelForBlocks(CpuThreadPool(), s.n, RowsPerTask(s.c),
                        [&](int64_t b, int64_t e) {
                          for (int64_t i = b; i < e; ++i) {
                            float* row = dlogits + i * s.c;
                            for (int64_t j = 0; j < s.c; ++j) {
                              row[j] = c::SoftmaxXentGradFromExp(
                                  s, row[j], sum[i], j == labels[i]);
                            }
                          }
                        });
      return absl::OkStatus();
    }
  }
  // The rows' exps on the lane kernels' vector exp (CanonicalExp's bits).
  const auto exp_row = [isa](float* v, int64_t n) {
    CanonicalExpLanes(v, v, n, isa);
  };
  ParallelForBlocks(
      CpuThreadPool(), s.n, RowsPerTask(s.c), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          c::SoftmaxXentGradRowOnce(s, logits, labels, i, dlogits, exp_row);
        }
      });
  return absl::OkStatus();
}

absl::Status SgdKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                       const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kSgdUpdate, in, 1, out, 1));
  const absl::string_view names[] = {"w"};
  LS_RETURN_IF_ERROR(ValidateOptimizer(op::kSgdUpdate, in[0], out, names, a));
  float* w = out[0].data<float>();
  const float* g = in[0].data<float>();
  ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementwiseBlock,
                    [&](int64_t i, int64_t e) {
                      c::SgdUpdate(w + i, g + i, e - i, a.learning_rate);
                    });
  return absl::OkStatus();
}

absl::Status MomentumKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                            const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kMomentumUpdate, in, 1, out, 2));
  const absl::string_view names[] = {"w", "v"};
  LS_RETURN_IF_ERROR(
      ValidateOptimizer(op::kMomentumUpdate, in[0], out, names, a));
  float* w = out[0].data<float>();
  float* v = out[1].data<float>();
  const float* g = in[0].data<float>();
  ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementwiseBlock,
                    [&](int64_t i, int64_t e) {
                      c::MomentumUpdate(w + i, v + i, g + i, e - i,
                                        a.learning_rate, a.momentum);
                    });
  return absl::OkStatus();
}

absl::Status AdamKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                        const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kAdamUpdate, in, 1, out, 3));
  const absl::string_view names[] = {"w", "m", "v"};
  LS_RETURN_IF_ERROR(ValidateOptimizer(op::kAdamUpdate, in[0], out, names, a));
  const c::AdamScalars s =
      c::AdamScalarsOf(a.learning_rate, a.beta1, a.beta2, a.epsilon, a.step);
  float* w = out[0].data<float>();
  float* m = out[1].data<float>();
  float* v = out[2].data<float>();
  const float* g = in[0].data<float>();
  const CpuIsa isa = ActiveCpuIsa();
  ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementwiseBlock,
                    [&](int64_t i, int64_t e) {
                      AdamLanes(s, w + i, m + i, v + i, g + i, e - i, isa);
                    });
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterCpuCanonicalKernels(Registry* registry) {
  struct Entry {
    const char* op;
    KernelFn fn;
  };
  const Entry scalar[] = {
      {op::kDenseForward, &DenseForwardKernel},
      {op::kDenseGradInput, &DenseGradInputKernel},
      {op::kDenseGradWeight, &DenseGradWeightKernel},
      {op::kBiasAddGrad, &BiasAddGradKernel<false>},
  };
  for (const Entry& e : scalar) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, Mode::kCanonical, kScalarAlgorithm, kCpuBackendName},
        e.fn));
  }
  LS_RETURN_IF_ERROR(cpu_internal::RegisterFastCanonicalKernels(registry));
  const Entry entries[] = {
      {op::kBiasAddForward, &BiasAddForwardKernel},
      {op::kBiasAddGrad, &BiasAddGradKernel<true>},
      {op::kReluForward, &ReluForwardKernel},
      {op::kReluGrad, &ReluGradKernel},
      {op::kFlatten, &FlattenKernel},
      {op::kAddForward, &AddForwardKernel},
      {op::kAddGrad, &AddGradKernel},
      {op::kSoftmaxXentForward, &SoftmaxXentForwardKernel},
      {op::kSoftmaxXentGrad, &SoftmaxXentGradKernel},
      {op::kSgdUpdate, &SgdKernel},
      {op::kMomentumUpdate, &MomentumKernel},
      {op::kAdamUpdate, &AdamKernel},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName},
        e.fn));
  }
  LS_RETURN_IF_ERROR(cpu_internal::RegisterSpatialKernels(registry));
  LS_RETURN_IF_ERROR(cpu_internal::RegisterNnKernels(registry));
  LS_RETURN_IF_ERROR(cpu_internal::RegisterMatMulCanonicalKernels(registry));
  LS_RETURN_IF_ERROR(cpu_internal::RegisterGraphElementwiseKernels(registry));
  return cpu_internal::RegisterGraphDataKernels(registry);
}

}  // namespace lockstep::kernels
