// The GPU cost-of-determinism benchmark (vendor_runtime.h
// RunVendorBenchmarks): the CANONICAL CUDA kernel against the DETERMINISTIC
// and DEFAULT cuBLAS GEMMs and cuDNN convolutions, timed on device-resident
// buffers with the same handles, plan cache and per-device mutex as the
// kernel functions.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/plan.h"
#include "kernels/cuda/tiled_gemm.h"
#include "kernels/cudnn/cublas_gemm.h"
#include "kernels/cudnn/cudnn_conv.h"
#include "kernels/cudnn/vendor_context.h"
#include "kernels/cudnn/vendor_plan.h"
#include "kernels/cudnn/vendor_runtime.h"
#include "kernels/cudnn/vendor_status.h"
#include "kernels/ops/dense.h"
#include "kernels/spatial/conv2d.h"
#include "kernels/tensor.h"

namespace lockstep::kernels::vendor {
namespace {

namespace c = ::lockstep::canonical;
namespace sp = ::lockstep::spatial;
using internal::ConvPlan;
using internal::CublasHandle;
using internal::CudnnHandle;
using internal::CurrentContext;
using internal::DeviceContext;
using internal::DirectionName;
using internal::EnqueueConv;
using internal::EnqueueSgemm;
using internal::GetConvPlan;
using ::lockstep::kernels::cuda::DeviceBuffer;

// Columns of the cost-of-determinism table.
enum BenchColumn { kCanonicalColumn = 0, kDeterministicColumn, kDefaultColumn };
constexpr int kBenchColumns = 3;
constexpr const char* kBenchColumnNames[kBenchColumns] = {
    "canonical", "deterministic", "default"};

struct BenchRow {
  std::string name;  // "gemm 1024x1024x1024", "conv2d.forward lenet"
  double flops = 0.0;
  std::array<absl::StatusOr<float>, kBenchColumns> ms = {
      absl::UnknownError("not run"), absl::UnknownError("not run"),
      absl::UnknownError("not run")};
  std::string algorithms;  // the cuDNN algorithms chosen, if any
  // GEMM rows: the canonical kernel with the tiled GEMM off (one thread
  // per output).
  bool gemm = false;
  absl::StatusOr<float> untiled_ms = absl::UnknownError("not run");
  // GEMM rows: every tiled GEMM configuration (cuda::WithGemmConfig), by
  // index, launched directly on the same buffers.
  std::vector<absl::StatusOr<float>> config_ms;
  // GEMM rows: the configuration the planner runs for this product on this
  // device (cuda::PlanGemmConfig).
  int planned_config = cuda::kPlannedGemmConfig;
};

// The tiled canonical GEMM's target: this fraction of cuBLAS SGEMM's
// GFLOP/s on the DETERMINISTIC handle (pedantic math: no TF32).
constexpr double kTiledGemmTarget = 0.7;

// Every benchmark buffer holds float32 0x3c3c3c3c (about 0.0115): finite,
// normal, and small enough that no sum overflows.
absl::Status AllocateFilled(DeviceBuffer& buffer, size_t floats) {
  LS_RETURN_IF_ERROR(buffer.Allocate(floats * sizeof(float)));
  LS_CUDA_RETURN_IF_ERROR(
      cudaMemset(buffer.get(), 0x3c, floats * sizeof(float)));
  return absl::OkStatus();
}

// The CANONICAL CUDA kernel of `op` on device buffers: planned by
// cuda::PlanCanonicalOp on host tensors of the same shapes (the registered
// kernel's validation and launches), each planned buffer mapped to the
// caller's device buffer of the same tensor (scratch is allocated here),
// and timed with cuda::LaunchOnDevice.
absl::StatusOr<float> TimeCanonicalMs(
    absl::string_view op, const std::vector<std::vector<int64_t>>& in_shapes,
    const std::vector<int64_t>& out_shape, const OpAttrs& attrs,
    absl::Span<void* const> in_device, void* out_device, int reps,
    const cuda::PlanOptions& options = cuda::DevicePlanOptions()) {
  std::vector<Tensor> in;
  for (const std::vector<int64_t>& shape : in_shapes) {
    LS_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(DType::kFloat32, shape));
    in.push_back(std::move(t));
  }
  std::vector<Tensor> out;
  {
    LS_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(DType::kFloat32, out_shape));
    out.push_back(std::move(t));
  }
  LS_ASSIGN_OR_RETURN(
      cuda::DeviceCall call,
      cuda::PlanCanonicalOp(op, in, absl::MakeSpan(out), attrs, options));
  std::vector<void*> device(call.buffers.size(), nullptr);
  std::vector<std::unique_ptr<DeviceBuffer>> scratch;
  for (size_t b = 0; b < call.buffers.size(); ++b) {
    const void* host = call.buffers[b].host;
    for (size_t i = 0; i < in.size() && i < in_device.size(); ++i) {
      if (host == in[i].raw_data()) device[b] = in_device[i];
    }
    if (host == out[0].raw_data()) device[b] = out_device;
    if (device[b] != nullptr) continue;
    if (host != nullptr) {
      return absl::InternalError(absl::StrFormat(
          "%s benchmark: planned buffer %d is none of the call's tensors", op,
          b));
    }
    scratch.push_back(std::make_unique<DeviceBuffer>());
    LS_RETURN_IF_ERROR(scratch.back()->Allocate(call.buffers[b].bytes));
    device[b] = scratch.back()->get();
  }
  return cuda::TimeDeviceWorkMs(
      reps, [&]() { return cuda::LaunchOnDevice(call, device); });
}

// Square row-major GEMM y[M, N] = x[M, K] w[K, N] with M = N = K = size.
// REQUIRES ctx->mu held.
absl::StatusOr<BenchRow> GemmRow(DeviceContext* ctx, int64_t size, int reps) {
  BenchRow row;
  row.name = absl::StrFormat("gemm %dx%dx%d", size, size, size);
  row.flops = 2.0 * size * size * size;
  row.gemm = true;
  c::DenseShape d;
  d.m = size;
  d.k = size;
  d.n = size;
  const c::MatMulShape s = c::DenseForwardShape(d);
  LS_ASSIGN_OR_RETURN(ColumnMajorGemm g, MapToColumnMajorGemm(s));
  DeviceBuffer x, w, y;
  LS_RETURN_IF_ERROR(AllocateFilled(x, size * size));
  LS_RETURN_IF_ERROR(AllocateFilled(w, size * size));
  LS_RETURN_IF_ERROR(AllocateFilled(y, size * size));
  row.ms[kCanonicalColumn] = TimeCanonicalMs(
      op::kDenseForward, {{size, size}, {size, size}}, {size, size}, OpAttrs{},
      {x.get(), w.get()}, y.get(), reps);
  cuda::PlanOptions untiled;
  untiled.tiled_gemm = false;
  row.untiled_ms = TimeCanonicalMs(
      op::kDenseForward, {{size, size}, {size, size}}, {size, size}, OpAttrs{},
      {x.get(), w.get()}, y.get(), reps, untiled);
  {
    c::BatchedMatMulShape bs;
    bs.m = s;
    bs.batch = 1;
    bs.a_batch = size * size;
    bs.b_batch = size * size;
    bs.c_batch = size * size;
    bs.scale = 1.0f;
    row.planned_config = cuda::PlanGemmConfig(
        bs, cuda::DevicePlanOptions().device_multiprocessors);
    DeviceBuffer scratch;  // enough for every configuration
    int64_t scratch_floats = 0;
    for (int config = 0; config < cuda::kGemmConfigs; ++config) {
      scratch_floats =
          std::max(scratch_floats, cuda::GemmConfigScratchFloats(config, bs));
    }
    absl::Status allocated = absl::OkStatus();
    if (scratch_floats > 0) {
      allocated = scratch.Allocate(scratch_floats * sizeof(float));
    }
    for (int config = 0; config < cuda::kGemmConfigs; ++config) {
      if (!allocated.ok()) {
        row.config_ms.push_back(allocated);
        continue;
      }
      row.config_ms.push_back(cuda::TimeDeviceWorkMs(reps, [&]() {
        return cuda::LaunchTiledGemmConfig(
            config, bs, x.f(), w.f(), y.f(),
            scratch_floats > 0 ? static_cast<float*>(scratch.get()) : nullptr);
      }));
    }
  }
  for (const bool deterministic : {true, false}) {
    absl::StatusOr<float>& cell =
        row.ms[deterministic ? kDeterministicColumn : kDefaultColumn];
    absl::StatusOr<cublasHandle_t> h = CublasHandle(ctx, deterministic);
    if (!h.ok()) {
      cell = h.status();
      continue;
    }
    cell = cuda::TimeDeviceWorkMs(
        reps, [&]() { return EnqueueSgemm(*h, g, x.f(), w.f(), y.f()); });
  }
  return row;
}

// One cuDNN convolution shape's timing in one mode: the plan the vendor
// kernel would use (heuristic choice or cudnnFind, cached per shape), its
// workspace allocated once. REQUIRES ctx->mu held.
absl::StatusOr<float> TimeCudnnMs(DeviceContext* ctx, cudnnHandle_t h,
                                  Mode mode, ConvDirection dir,
                                  const sp::Conv2dShape& s,
                                  const DeviceBuffer& in0,
                                  const DeviceBuffer& in1, DeviceBuffer& out,
                                  int reps, std::string* choice) {
  LS_ASSIGN_OR_RETURN(const ConvPlan* plan,
                      GetConvPlan(ctx, h, mode, dir, s, in0, in1, out));
  *choice = plan->choice;
  DeviceBuffer ws;
  LS_RETURN_IF_ERROR(ws.Allocate(plan->workspace_bytes));
  return cuda::TimeDeviceWorkMs(reps, [&]() {
    return EnqueueConv(h, dir, *plan, in0.get(), in1.get(), out.get(),
                       ws.get());
  });
}

// One direction of a convolution layer. REQUIRES ctx->mu held.
absl::StatusOr<BenchRow> ConvRow(DeviceContext* ctx, absl::string_view layer,
                                 const sp::Conv2dShape& s, ConvDirection dir,
                                 int reps) {
  BenchRow row;
  row.name = absl::StrFormat("%s %s", DirectionName(dir), layer);
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  row.flops =
      2.0 * s.n * s.c_out * out_h * out_w * (s.c_in / s.groups) * s.k_h * s.k_w;
  const std::vector<int64_t> x_shape = {s.n, s.c_in, s.h, s.w};
  const std::vector<int64_t> w_shape = {s.c_out, s.c_in / s.groups, s.k_h,
                                        s.k_w};
  const std::vector<int64_t> y_shape = {s.n, s.c_out, out_h, out_w};
  std::vector<int64_t> in0_shape, in1_shape, out_shape;
  switch (dir) {
    case ConvDirection::kForward:
      in0_shape = x_shape;
      in1_shape = w_shape;
      out_shape = y_shape;
      break;
    case ConvDirection::kGradInput:
      in0_shape = y_shape;
      in1_shape = w_shape;
      out_shape = x_shape;
      break;
    case ConvDirection::kGradWeight:
      in0_shape = x_shape;
      in1_shape = y_shape;
      out_shape = w_shape;
      break;
  }
  const auto numel = [](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return static_cast<size_t>(n);
  };
  DeviceBuffer in0, in1, out;
  LS_RETURN_IF_ERROR(AllocateFilled(in0, numel(in0_shape)));
  LS_RETURN_IF_ERROR(AllocateFilled(in1, numel(in1_shape)));
  LS_RETURN_IF_ERROR(AllocateFilled(out, numel(out_shape)));
  OpAttrs attrs;
  attrs.stride_h = s.stride_h;
  attrs.stride_w = s.stride_w;
  attrs.pad_top = s.pad_top;
  attrs.pad_bottom = s.pad_bottom;
  attrs.pad_left = s.pad_left;
  attrs.pad_right = s.pad_right;
  attrs.dilation_h = s.dilation_h;
  attrs.dilation_w = s.dilation_w;
  attrs.groups = s.groups;
  row.ms[kCanonicalColumn] =
      TimeCanonicalMs(DirectionName(dir), {in0_shape, in1_shape}, out_shape,
                      attrs, {in0.get(), in1.get()}, out.get(), reps);
  absl::StatusOr<cudnnHandle_t> h = CudnnHandle(ctx);
  if (!h.ok()) {
    row.ms[kDeterministicColumn] = h.status();
    row.ms[kDefaultColumn] = h.status();
    return row;
  }
  std::string deterministic_choice = "-", default_choice = "-";
  row.ms[kDeterministicColumn] =
      TimeCudnnMs(ctx, *h, Mode::kDeterministic, dir, s, in0, in1, out, reps,
                  &deterministic_choice);
  row.ms[kDefaultColumn] = TimeCudnnMs(ctx, *h, Mode::kDefault, dir, s, in0,
                                       in1, out, reps, &default_choice);
  row.algorithms = absl::StrFormat("deterministic %s; default %s",
                                   deterministic_choice, default_choice);
  return row;
}

std::string Gflops(double flops, const absl::StatusOr<float>& ms) {
  if (!ms.ok() || *ms <= 0.0f) return "-";
  return absl::StrFormat("%.1f", flops / (*ms * 1e-3) / 1e9);
}
std::string Gflops(const BenchRow& row, int column) {
  return Gflops(row.flops, row.ms[column]);
}

// GFLOP/s ratio of column `num` to column `den` (= the inverse time ratio).
std::string Ratio(const BenchRow& row, int num, int den) {
  const absl::StatusOr<float>& a = row.ms[num];
  const absl::StatusOr<float>& b = row.ms[den];
  if (!a.ok() || !b.ok() || *a <= 0.0f || *b <= 0.0f) return "-";
  return absl::StrFormat("%.3f", *b / *a);
}

// A lost device ends the benchmark; any other failure is one cell's.
bool DeviceLost(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition;
}

}  // namespace

absl::StatusOr<std::string> RunVendorBenchmarks(int reps) {
  if (reps < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RunVendorBenchmarks: reps must be >= 1, got %d", reps));
  }
  LS_RETURN_IF_ERROR(cuda::CudaDeviceStatus());
  LS_ASSIGN_OR_RETURN(DeviceContext * ctx, CurrentContext());
  std::lock_guard<std::mutex> lock(ctx->mu);

  std::string report;
  {
    cudaDeviceProp prop;
    LS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ctx->device));
    int runtime = 0, driver = 0, cublas = 0;
    LS_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&runtime));
    LS_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&driver));
    LS_ASSIGN_OR_RETURN(cublasHandle_t h, CublasHandle(ctx, true));
    LS_CUBLAS_RETURN_IF_ERROR(cublasGetVersion(h, &cublas));
    report += absl::StrFormat(
        "cost of determinism on %s (sm_%d%d): CUDA runtime %d, driver %d, "
        "cuBLAS %d, cuDNN %d\n",
        prop.name, prop.major, prop.minor, runtime, driver, cublas,
        static_cast<int64_t>(cudnnGetVersion()));
  }
  report += absl::StrFormat(
      "GFLOP/s on device-resident float32 buffers, CUDA events, best of %d "
      "runs after one warm-up run\n",
      reps);
  report +=
      "  canonical      CANONICAL CUDA kernel (kernels/cuda, canonical "
      "reduction order: the tiled GEMM for gemm and conv2d.forward, one "
      "thread per output for the conv gradients)\n"
      "  deterministic  the DETERMINISTIC kernels: cuBLAS with atomics not "
      "allowed, pedantic math, a fixed 32 MiB workspace; cuDNN with FMA "
      "math and the first deterministic heuristic algorithm\n"
      "  default        the DEFAULT kernels: cuBLAS with atomics allowed and "
      "default math; cuDNN with default math (TF32 on sm_80+) and the "
      "fastest algorithm by cudnnFind\n"
      "  gemm: y[M, N] = x[M, K] w[K, N], row-major, 2 M N K flops; conv: "
      "2 N C_out H_out W_out C_in K_h K_w flops in every direction\n"
      "  lenet: N=64, C 6 -> 16, 14x14 -> 10x10, 5x5 kernel; resnet: N=32, "
      "C 64 -> 64, 56x56 -> 56x56, 3x3 kernel, pad 1\n";

  std::vector<BenchRow> rows;
  for (const int64_t size : {int64_t{1024}, int64_t{2048}}) {
    LS_ASSIGN_OR_RETURN(BenchRow row, GemmRow(ctx, size, reps));
    rows.push_back(std::move(row));
  }
  sp::Conv2dShape lenet;
  lenet.n = 64;
  lenet.c_in = 6;
  lenet.h = 14;
  lenet.w = 14;
  lenet.c_out = 16;
  lenet.k_h = 5;
  lenet.k_w = 5;
  sp::Conv2dShape resnet;
  resnet.n = 32;
  resnet.c_in = 64;
  resnet.h = 56;
  resnet.w = 56;
  resnet.c_out = 64;
  resnet.k_h = 3;
  resnet.k_w = 3;
  resnet.pad_top = resnet.pad_bottom = resnet.pad_left = resnet.pad_right = 1;
  const std::pair<const char*, sp::Conv2dShape> layers[] = {{"lenet", lenet},
                                                            {"resnet", resnet}};
  for (const auto& [layer, shape] : layers) {
    for (const ConvDirection dir :
         {ConvDirection::kForward, ConvDirection::kGradInput,
          ConvDirection::kGradWeight}) {
      LS_ASSIGN_OR_RETURN(BenchRow row, ConvRow(ctx, layer, shape, dir, reps));
      rows.push_back(std::move(row));
    }
  }

  report += absl::StrFormat("%-27s %8s %10s %14s %10s %10s %12s\n", "case",
                            "GFLOP", "canonical", "deterministic", "default",
                            "canon/det", "det/default");
  std::string notes;
  for (const BenchRow& row : rows) {
    report += absl::StrFormat(
        "%-27s %8.3f %10s %14s %10s %10s %12s\n", row.name, row.flops / 1e9,
        Gflops(row, kCanonicalColumn), Gflops(row, kDeterministicColumn),
        Gflops(row, kDefaultColumn),
        Ratio(row, kCanonicalColumn, kDeterministicColumn),
        Ratio(row, kDeterministicColumn, kDefaultColumn));
    for (int col = 0; col < kBenchColumns; ++col) {
      if (row.ms[col].ok()) continue;
      if (DeviceLost(row.ms[col].status())) return row.ms[col].status();
      notes +=
          absl::StrFormat("  %s, %s: %s\n", row.name, kBenchColumnNames[col],
                          row.ms[col].status().ToString());
    }
  }
  report += absl::StrFormat(
      "tiled canonical GEMM vs cuBLAS SGEMM (the deterministic column: "
      "pedantic math, no TF32), target >= %.2f:\n",
      kTiledGemmTarget);
  for (const BenchRow& row : rows) {
    if (!row.gemm) continue;
    const absl::StatusOr<float>& tiled = row.ms[kCanonicalColumn];
    const absl::StatusOr<float>& cublas = row.ms[kDeterministicColumn];
    std::string verdict = "-";
    if (tiled.ok() && cublas.ok() && *tiled > 0.0f) {
      verdict = *cublas / *tiled >= kTiledGemmTarget ? "meets the target"
                                                     : "below the target";
    }
    report += absl::StrFormat(
        "  %-27s tiled %s GFLOP/s, one thread per output %s GFLOP/s, cuBLAS "
        "%s GFLOP/s; tiled/cuBLAS %s (%s)\n",
        row.name, Gflops(row, kCanonicalColumn),
        Gflops(row.flops, row.untiled_ms), Gflops(row, kDeterministicColumn),
        Ratio(row, kCanonicalColumn, kDeterministicColumn), verdict);
    for (int config = 0; config < static_cast<int>(row.config_ms.size());
         ++config) {
      const absl::StatusOr<float>& ms = row.config_ms[config];
      std::string ratio = "-";
      if (ms.ok() && cublas.ok() && *ms > 0.0f) {
        ratio = absl::StrFormat("%.3f", *cublas / *ms);
      }
      report += absl::StrFormat(
          "    tiled %-24s %10s GFLOP/s, tiled/cuBLAS %s%s\n",
          cuda::GemmConfigName(config), Gflops(row.flops, ms), ratio,
          config == row.planned_config ? " (planned)" : "");
      if (!ms.ok()) {
        if (DeviceLost(ms.status())) return ms.status();
        notes += absl::StrFormat("  %s, tiled %s: %s\n", row.name,
                                 cuda::GemmConfigName(config),
                                 ms.status().ToString());
      }
    }
    if (!row.untiled_ms.ok()) {
      if (DeviceLost(row.untiled_ms.status())) return row.untiled_ms.status();
      notes += absl::StrFormat("  %s, canonical one thread per output: %s\n",
                               row.name, row.untiled_ms.status().ToString());
    }
  }
  report += "cuDNN algorithms chosen:\n";
  for (const BenchRow& row : rows) {
    if (row.algorithms.empty()) continue;
    report += absl::StrFormat("  %s: %s\n", row.name, row.algorithms);
  }
  if (!notes.empty()) report += "not measured:\n" + notes;
  return report;
}

}  // namespace lockstep::kernels::vendor
