#include "kernels/cuda/plan.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/cuda/launch_limits.h"
#include "kernels/cuda/leaf_hash.h"
#include "kernels/cuda/tiled_gemm.h"
#include "kernels/cuda/warp.h"
#include "kernels/graph_ops.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/graph_validate.h"
#include "kernels/ops/validate.h"
#include "kernels/spatial/tensor_shapes.h"
#include "kernels/spatial/validate.h"

namespace lockstep::kernels::cuda {
namespace {

// ---- call building --------------------------------------------------------

bool IsIn(absl::string_view name, const std::vector<std::string>& names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

int AddBuffer(DeviceCall* call, void* host, int64_t bytes, bool copy_in,
              bool copy_out) {
  CallBuffer b;
  b.host = host;
  b.bytes = bytes;
  b.copy_in = copy_in;
  b.copy_out = copy_out;
  call->buffers.push_back(b);
  return static_cast<int>(call->buffers.size()) - 1;
}
// A tensor's buffer. In a resident run its host bytes may be stale (its
// mirror is newer): the runner takes the bytes from the mirror, so only the
// address is taken here; otherwise the host bytes are brought current.
int AddTensor(DeviceCall* call, Tensor& t, bool copy_in, bool copy_out) {
  void* host =
      ActiveResidentRun() != nullptr
          ? t.unsynced_data()
          : (copy_out ? t.raw_data()
                      : const_cast<void*>(std::as_const(t).raw_data()));
  const int b = AddBuffer(call, host, t.bytes(), copy_in, copy_out);
  call->buffers[b].is_tensor = true;
  call->buffers[b].tensor = t;
  return b;
}
int AddIn(DeviceCall* call, const Tensor& t) {
  Tensor handle = t;
  return AddTensor(call, handle, true, false);
}
int AddOut(DeviceCall* call, Tensor& t) {
  return AddTensor(call, t, false, true);
}
// Optimizer state: read and written.
int AddInOut(DeviceCall* call, Tensor& t) {
  return AddTensor(call, t, true, true);
}
int AddScratch(DeviceCall* call, int64_t bytes) {
  return AddBuffer(call, nullptr, bytes, false, false);
}

KernelParams& AddLaunch(DeviceCall* call, DeviceOp op, int64_t work,
                        std::initializer_list<int> ins,
                        std::initializer_list<int> outs) {
  Launch l;
  l.params.op = op;
  l.params.work = work;
  int k = 0;
  for (int b : ins) l.in_buf[k++] = b;
  k = 0;
  for (int b : outs) l.out_buf[k++] = b;
  call->launches.push_back(l);
  return call->launches.back().params;
}

// y[offset_y + o] = the canonical tree of parts[offset_parts + e * outputs
// + o] over e < count (CanonicalNanOf'd when `nan`); offsets in floats.
void AddTreeSum(DeviceCall* call, int parts, int64_t offset_parts, int y,
                int64_t offset_y, int64_t count, int64_t outputs, bool nan) {
  KernelParams& p =
      AddLaunch(call, DeviceOp::kTreeSumParts, outputs, {parts}, {y});
  p.tree_parts = count;
  p.tree_nan = nan;
  Launch& l = call->launches.back();
  l.in_offset[0] = offset_parts * int64_t{sizeof(float)};
  l.out_offset[0] = offset_y * int64_t{sizeof(float)};
}

// ---- dense family ---------------------------------------------------------

// Whether a product runs as the tiled GEMM: each of its dimensions is at
// least kTiledGemmMinDim.
bool TilesProduct(const c::MatMulShape& s, const PlanOptions& options) {
  return options.tiled_gemm && s.rows >= kTiledGemmMinDim &&
         s.cols >= kTiledGemmMinDim && s.depth >= kTiledGemmMinDim;
}

// One product c = a b (every batch entry): the tiled GEMM when it
// TilesProduct (its tree scratch only when the reduction has several
// chunks), else one thread per output (kMatMul for a single unscaled entry,
// kBatchedMatMul otherwise).
void AddProduct(DeviceCall* call, const c::BatchedMatMulShape& s, int a, int b,
                int out, const PlanOptions& options) {
  if (TilesProduct(s.m, options)) {
    const int config = PlanGemmConfig(s, options.device_multiprocessors);
    const int64_t scratch_floats = GemmConfigScratchFloats(config, s);
    const int scratch = scratch_floats > 0
                            ? AddScratch(call, scratch_floats * sizeof(float))
                            : -1;
    KernelParams& p =
        AddLaunch(call, DeviceOp::kTiledMatMul, GemmConfigTiles(config, s),
                  {a, b}, {out, scratch});
    p.batched_matmul = s;
    p.gemm_config = config;
    return;
  }
  if (s.batch == 1 && s.scale == 1.0f) {
    AddLaunch(call, DeviceOp::kMatMul, s.m.rows * s.m.cols, {a, b}, {out})
        .matmul = s.m;
    return;
  }
  AddLaunch(call, DeviceOp::kBatchedMatMul, s.batch * s.m.rows * s.m.cols,
            {a, b}, {out})
      .batched_matmul = s;
}

absl::Status PlanDense(absl::string_view name, absl::Span<const Tensor> in,
                       absl::Span<Tensor> out, const OpAttrs& a,
                       const PlanOptions& options, DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  c::DenseShape d;
  c::MatMulShape s;
  if (name == op::kDenseForward) {
    LS_ASSIGN_OR_RETURN(d, ValidateDenseForward(in[0], in[1], out[0], a));
    s = c::DenseForwardShape(d);
  } else if (name == op::kDenseGradInput) {
    LS_ASSIGN_OR_RETURN(d, ValidateDenseGradInput(in[0], in[1], out[0], a));
    s = c::DenseGradInputShape(d);
  } else {
    LS_ASSIGN_OR_RETURN(d, ValidateDenseGradWeight(in[0], in[1], out[0], a));
    s = c::DenseGradWeightShape(d);
  }
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  // An empty reduction gives +0.0f from the body itself (CanonicalDot of
  // zero terms), which is what the CPU's zero fill writes.
  const int a_buf = AddIn(call, in[0]);
  const int b_buf = AddIn(call, in[1]);
  const int c_buf = AddOut(call, out[0]);
  c::BatchedMatMulShape one;
  one.m = s;
  one.batch = 1;
  AddProduct(call, one, a_buf, b_buf, c_buf, options);
  return absl::OkStatus();
}

// matmul.forward: one launch; matmul.grad: one per output. An empty
// reduction gives +0.0f from the body itself.
absl::Status PlanMatMul(absl::string_view name, absl::Span<const Tensor> in,
                        absl::Span<Tensor> out, const OpAttrs& a,
                        const PlanOptions& options, DeviceCall* call) {
  const bool forward = name == op::kMatMulForward;
  LS_ASSIGN_OR_RETURN(c::MatMulDims d, ValidateMatMulCall(name, in, out, a));
  const int a_buf = AddIn(call, in[0]);
  const int b_buf = AddIn(call, in[1]);
  if (forward) {
    const int y = AddOut(call, out[0]);
    AddProduct(call, c::MatMulForwardShape(d), a_buf, b_buf, y, options);
    return absl::OkStatus();
  }
  const int dy = AddIn(call, in[2]);
  const int da = AddOut(call, out[0]);
  const int db = AddOut(call, out[1]);
  AddProduct(call, c::MatMulGradAShape(d), dy, b_buf, da, options);
  AddProduct(call, c::MatMulGradBShape(d), a_buf, dy, db, options);
  return absl::OkStatus();
}

absl::Status PlanBiasAdd(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                         DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(op::kBiasAddForward, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::BiasShape s, ValidateBiasAdd(in[0], in[1], out[0]));
  if (out[0].SharesStorageWith(in[1])) {
    return absl::InvalidArgumentError(
        "bias_add.forward: y must not share storage with b");
  }
  const int x = AddIn(call, in[0]);
  const int b = AddIn(call, in[1]);
  const int y = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kBiasAdd, in[0].numel(), {x, b}, {y}).bias = s;
  return absl::OkStatus();
}

absl::Status PlanBiasAddGrad(absl::Span<const Tensor> in,
                             absl::Span<Tensor> out, DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(op::kBiasAddGrad, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(c::BiasShape s, ValidateBiasAddGrad(in[0], out[0]));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kBiasAddGrad, in, out));
  const int dy = AddIn(call, in[0]);
  const int db = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kBiasAddGrad, s.c, {dy}, {db}).bias = s;
  return absl::OkStatus();
}

absl::Status PlanRelu(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                      DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(op::kReluForward, in, 1, out, 1));
  const Tensor* t[] = {&in[0], &out[0]};
  const absl::string_view names[] = {"x", "y"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op::kReluForward, t, names));
  const int x = AddIn(call, in[0]);
  const int y = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kRelu, in[0].numel(), {x}, {y});
  return absl::OkStatus();
}

absl::Status PlanReluGrad(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                          DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(op::kReluGrad, in, 2, out, 1));
  const Tensor* t[] = {&in[0], &in[1], &out[0]};
  const absl::string_view names[] = {"x", "dy", "dx"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op::kReluGrad, t, names));
  const int x = AddIn(call, in[0]);
  const int dy = AddIn(call, in[1]);
  const int dx = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kReluGrad, in[0].numel(), {x, dy}, {dx});
  return absl::OkStatus();
}

absl::Status PlanAdd(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                     DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(op::kAddForward, in, 2, out, 1));
  const Tensor* t[] = {&in[0], &in[1], &out[0]};
  const absl::string_view names[] = {"a", "b", "y"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op::kAddForward, t, names));
  const int a = AddIn(call, in[0]);
  const int b = AddIn(call, in[1]);
  const int y = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kAdd, in[0].numel(), {a, b}, {y});
  return absl::OkStatus();
}

// A bit copy of src into dst (same byte count).
void AddCopy(DeviceCall* call, int src, int dst, int64_t bytes) {
  if (bytes % 4 == 0) {
    AddLaunch(call, DeviceOp::kCopyWords, bytes / 4, {src}, {dst});
  } else {
    AddLaunch(call, DeviceOp::kCopyBytes, bytes, {src}, {dst});
  }
}

absl::Status PlanFlatten(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                         DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(op::kFlatten, in, 1, out, 1));
  LS_RETURN_IF_ERROR(ValidateFlatten(in[0], out[0]));
  const int x = AddIn(call, in[0]);
  const int y = AddOut(call, out[0]);
  AddCopy(call, x, y, in[0].bytes());
  return absl::OkStatus();
}

absl::Status PlanTranspose(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                           const OpAttrs& a, DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(op::kTranspose, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(c::TransposeShape s, ValidateTranspose(in[0], out[0], a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kTranspose, in, out));
  const int x = AddIn(call, in[0]);
  const int y = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kTranspose, s.numel, {x}, {y}).transpose = s;
  return absl::OkStatus();
}

absl::Status PlanReshape(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                         DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(op::kReshape, in, 1, out, 1));
  LS_RETURN_IF_ERROR(ValidateReshape(in[0], out[0]));
  const int x = AddIn(call, in[0]);
  const int y = AddOut(call, out[0]);
  AddCopy(call, x, y, in[0].bytes());
  return absl::OkStatus();
}

absl::Status PlanAddGrad(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                         DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(op::kAddGrad, in, 1, out, 2));
  const Tensor* t[] = {&in[0], &out[0], &out[1]};
  const absl::string_view names[] = {"dy", "da", "db"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op::kAddGrad, t, names));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kAddGrad, in, out));
  const int dy = AddIn(call, in[0]);
  const int da = AddOut(call, out[0]);
  AddCopy(call, dy, da, in[0].bytes());
  if (!out[1].SharesStorageWith(out[0])) {
    const int db = AddOut(call, out[1]);
    AddCopy(call, dy, db, in[0].bytes());
  }
  return absl::OkStatus();
}

absl::Status PlanSoftmaxForward(absl::Span<const Tensor> in,
                                absl::Span<Tensor> out, DeviceCall* call) {
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
  const int logits = AddIn(call, in[0]);
  const int labels = AddIn(call, in[1]);
  const int losses = AddScratch(call, s.n * int64_t{sizeof(float)});
  const int loss = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kSoftmaxExampleLoss, s.n, {logits, labels},
            {losses})
      .softmax = s;
  AddLaunch(call, DeviceOp::kSoftmaxMeanLoss, 1, {losses}, {loss}).softmax = s;
  return absl::OkStatus();
}

absl::Status PlanSoftmaxGrad(absl::Span<const Tensor> in,
                             absl::Span<Tensor> out, DeviceCall* call) {
  const absl::string_view name = op::kSoftmaxXentGrad;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::SoftmaxShape s,
                      ValidateSoftmaxXent(name, in[0], in[1]));
  const Tensor* t[] = {&in[0], &out[0]};
  const absl::string_view names[] = {"logits", "dlogits"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(name, t, names));
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  const int logits = AddIn(call, in[0]);
  const int labels = AddIn(call, in[1]);
  const int stats = AddScratch(call, 2 * s.n * int64_t{sizeof(float)});
  const int dlogits = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kSoftmaxRowStats, s.n, {logits}, {stats}).softmax =
      s;
  AddLaunch(call, DeviceOp::kSoftmaxGrad, s.n * s.c, {logits, labels, stats},
            {dlogits})
      .softmax = s;
  return absl::OkStatus();
}

absl::Status PlanOptimizer(absl::string_view name, absl::Span<const Tensor> in,
                           absl::Span<Tensor> out, const OpAttrs& a,
                           DeviceCall* call) {
  if (name == op::kSgdUpdate) {
    LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
    const absl::string_view names[] = {"w"};
    LS_RETURN_IF_ERROR(ValidateOptimizer(name, in[0], out, names, a));
    const int g = AddIn(call, in[0]);
    const int w = AddInOut(call, out[0]);
    AddLaunch(call, DeviceOp::kSgd, in[0].numel(), {g}, {w}).learning_rate =
        a.learning_rate;
  } else if (name == op::kMomentumUpdate) {
    LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 2));
    const absl::string_view names[] = {"w", "v"};
    LS_RETURN_IF_ERROR(ValidateOptimizer(name, in[0], out, names, a));
    const int g = AddIn(call, in[0]);
    const int w = AddInOut(call, out[0]);
    const int v = AddInOut(call, out[1]);
    KernelParams& p =
        AddLaunch(call, DeviceOp::kMomentum, in[0].numel(), {g}, {w, v});
    p.learning_rate = a.learning_rate;
    p.momentum = a.momentum;
  } else {
    LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 3));
    const absl::string_view names[] = {"w", "m", "v"};
    LS_RETURN_IF_ERROR(ValidateOptimizer(name, in[0], out, names, a));
    const int g = AddIn(call, in[0]);
    const int w = AddInOut(call, out[0]);
    const int m = AddInOut(call, out[1]);
    const int v = AddInOut(call, out[2]);
    // The scalars (with their float64 bias corrections) are computed once
    // on the host, exactly as the CPU kernel computes them.
    AddLaunch(call, DeviceOp::kAdam, in[0].numel(), {g}, {w, m, v}).adam =
        name == op::kAdamWUpdate
            ? c::AdamWScalarsOf(a.learning_rate, a.beta1, a.beta2, a.epsilon,
                                a.step, a.weight_decay)
            : c::AdamScalarsOf(a.learning_rate, a.beta1, a.beta2, a.epsilon,
                               a.step);
  }
  return absl::OkStatus();
}

// ---- spatial (Tensor checks shared with the CPU backend) ------------------

using ::lockstep::spatial::GlobalShape;
using ::lockstep::spatial::ResizeShape;

// A conv2d direction with groups == 1 as a product on a lowered matrix,
// per image n: out[n]^T (pixels x channels) = col[n]^T (pixels x taps)
// wmat^T (taps x channels), col[n, q, pix] and wmat[channel, q] dense,
// out[n, channel, pix]. The chain is fma(col, wmat, acc) over the taps in
// order:
//   forward     col = im2col of x (kConv2dIm2Col), wmat = w; taps
//               (ci, kh, kw), pixels H_out W_out, channels C_out:
//               Conv2dForwardElement's fma(x tap, w tap, acc).
//   grad_input  col = the dy taps (kConv2dGradInputCol), wmat = w' (w with
//               its first two axes swapped); taps (co, kh, kw), pixels H W,
//               channels C_in: Conv2dGradInputElement's fma(dy tap, w tap).
c::BatchedMatMulShape LoweredConvProduct(int64_t images, int64_t pixels,
                                         int64_t taps, int64_t channels) {
  c::BatchedMatMulShape p;
  p.m.rows = pixels;
  p.m.cols = channels;
  p.m.depth = taps;
  p.m.a_row = 1;  // col[n, q, pix]
  p.m.a_depth = pixels;
  p.m.b_depth = 1;  // wmat[channel, q]
  p.m.b_col = taps;
  p.m.c_row = 1;  // out[n, channel, pix]
  p.m.c_col = pixels;
  p.batch = images;
  p.a_batch = taps * pixels;
  p.b_batch = 0;
  p.c_batch = channels * pixels;
  return p;
}

// y[d1, d0, d2] = x[d0, d1, d2] (floats) as a kTranspose launch.
void AddSwapLeadingAxes(DeviceCall* call, int64_t d0, int64_t d1, int64_t d2,
                        int x, int y) {
  c::TransposeShape t;
  t.rank = 3;
  t.numel = d0 * d1 * d2;
  t.out_dims[0] = d1;
  t.out_dims[1] = d0;
  t.out_dims[2] = d2;
  t.src_strides[0] = d2;
  t.src_strides[1] = d1 * d2;
  t.src_strides[2] = 1;
  AddLaunch(call, DeviceOp::kTranspose, t.numel, {x}, {y}).transpose = t;
}

// conv2d grad_weight with groups == 1 as one reduction over S = N H_out
// W_out terms in Conv2dGradWeightElement's order (n, oh, ow): dw (C_out x
// K) = dy' (C_out x S) col (S x K), dy'[co, s] = dy[n, co, pix] (a
// transposed copy), col[q, s] (kConv2dGradWeightCol); the chain is
// fma(dy, x tap, acc), the element function's. The product has `entries`
// batch entries of `depth` terms, entry t reducing over s in [t stride,
// t stride + depth) into the t-th dw-sized block of its output.
c::BatchedMatMulShape GradWeightProduct(const sp::Conv2dShape& s, int64_t depth,
                                        int64_t entries, int64_t stride) {
  const int64_t terms = s.n * sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  const int64_t taps = s.c_in * s.k_h * s.k_w;
  c::BatchedMatMulShape p;
  p.m.rows = s.c_out;
  p.m.cols = taps;
  p.m.depth = depth;
  p.m.a_row = terms;  // dy'[co, s]
  p.m.a_depth = 1;
  p.m.b_depth = 1;  // col[q, s]
  p.m.b_col = terms;
  p.m.c_row = taps;  // dw[co, q]
  p.m.c_col = 1;
  p.batch = entries;
  p.a_batch = stride;
  p.b_batch = stride;
  p.c_batch = s.c_out * taps;
  return p;
}

// The lowered conv2d grad_weight (see GradWeightProduct). With few tiles
// the reduction is split into runs of 2^L whole chunks (the smallest L with
// runs * tiles <= options.split_blocks): one batched product writes each
// run's sum into a part, a second product the ragged last run (its
// operands and part at a byte offset), then kTreeSumParts adds the parts
// with the canonical tree. The parts are perfect subtrees of the chunk
// tree, so the bits are the unsplit product's.
void AddConvGradWeight(DeviceCall* call, const sp::Conv2dShape& s, int x,
                       int dy, int dw, const PlanOptions& options) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t pixels = out_h * out_w;
  const int64_t terms = s.n * pixels;
  const int64_t taps = s.c_in * s.k_h * s.k_w;
  const int dyt = AddScratch(call, terms * s.c_out * int64_t{sizeof(float)});
  AddSwapLeadingAxes(call, s.n, s.c_out, pixels, dy, dyt);
  const int col = AddScratch(call, taps * terms * int64_t{sizeof(float)});
  AddLaunch(call, DeviceOp::kConv2dGradWeightCol, taps * terms, {x}, {col})
      .conv = s;
  const c::BatchedMatMulShape whole = GradWeightProduct(s, terms, 1, 0);
  const int64_t tiles = GemmTileRows<PlannedGemmTile>(whole) *
                        GemmTileCols<PlannedGemmTile>(whole);
  const int64_t chunks = c::NumChunks(terms);
  int64_t run = 1;  // chunks per run
  while (run < chunks &&
         (chunks + run - 1) / run * tiles > options.split_blocks) {
    run *= 2;
  }
  const int64_t runs = (chunks + run - 1) / run;
  if (runs == 1) {
    AddProduct(call, whole, dyt, col, dw, options);
    return;
  }
  const int64_t run_terms = run * c::kChunk;
  const int64_t last_terms = terms - (runs - 1) * run_terms;
  const int64_t full = last_terms == run_terms ? runs : runs - 1;
  const int64_t outputs = s.c_out * taps;
  const int parts = AddScratch(call, runs * outputs * int64_t{sizeof(float)});
  AddProduct(call, GradWeightProduct(s, run_terms, full, run_terms), dyt, col,
             parts, options);
  if (full < runs) {
    AddProduct(call, GradWeightProduct(s, last_terms, 1, 0), dyt, col, parts,
               options);
    Launch& last = call->launches.back();
    last.in_offset[0] = last.in_offset[1] =
        full * run_terms * int64_t{sizeof(float)};
    last.out_offset[0] = full * outputs * int64_t{sizeof(float)};
  }
  AddLaunch(call, DeviceOp::kTreeSumParts, outputs, {parts}, {dw}).tree_parts =
      runs;
}

absl::Status PlanConv(absl::string_view name, absl::Span<const Tensor> in,
                      absl::Span<Tensor> out, const OpAttrs& a,
                      const PlanOptions& options, DeviceCall* call) {
  LS_ASSIGN_OR_RETURN(const sp::Conv2dShape s,
                      sp::ValidateConv2dCall(name, in, out, a));
  DeviceOp dop;
  int64_t work;
  // The transposed convolution runs the thread bodies of the conv2d s whose
  // input gradient it is; its grad_weight swaps the operands.
  bool swap = false;
  if (name == op::kConv2dForward || name == op::kConvTranspose2dGradInput) {
    dop = DeviceOp::kConv2dForward;
    work = sp::Conv2dOutputSize(s);
  } else if (name == op::kConv2dGradInput ||
             name == op::kConvTranspose2dForward) {
    dop = DeviceOp::kConv2dGradInput;
    work = sp::Conv2dInputSize(s);
  } else {
    dop = DeviceOp::kConv2dGradWeight;
    work = sp::Conv2dWeightSize(s);
    swap = name == op::kConvTranspose2dGradWeight;
  }
  const int i0 = AddIn(call, in[0]);
  const int i1 = AddIn(call, in[1]);
  const int o = AddOut(call, out[0]);
  const int64_t kernel = s.k_h * s.k_w;
  const int64_t out_pixels = sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  if (s.groups == 1 && dop == DeviceOp::kConv2dForward) {
    const c::BatchedMatMulShape product =
        LoweredConvProduct(s.n, out_pixels, s.c_in * kernel, s.c_out);
    if (TilesProduct(product.m, options)) {
      const int64_t col_floats = s.n * product.m.depth * product.m.rows;
      const int col = AddScratch(call, col_floats * sizeof(float));
      AddLaunch(call, DeviceOp::kConv2dIm2Col, col_floats, {i0}, {col}).conv =
          s;
      AddProduct(call, product, col, i1, o, options);
      return absl::OkStatus();
    }
  }
  if (s.groups == 1 && dop == DeviceOp::kConv2dGradInput) {
    const c::BatchedMatMulShape product =
        LoweredConvProduct(s.n, s.h * s.w, s.c_out * kernel, s.c_in);
    if (TilesProduct(product.m, options)) {
      const int64_t col_floats = s.n * product.m.depth * product.m.rows;
      const int col = AddScratch(call, col_floats * sizeof(float));
      AddLaunch(call, DeviceOp::kConv2dGradInputCol, col_floats, {i0}, {col})
          .conv = s;
      const int wt =
          AddScratch(call, sp::Conv2dWeightSize(s) * int64_t{sizeof(float)});
      AddSwapLeadingAxes(call, s.c_out, s.c_in, kernel, i1, wt);
      AddProduct(call, product, col, wt, o, options);
      return absl::OkStatus();
    }
  }
  if (s.groups == 1 && dop == DeviceOp::kConv2dGradWeight &&
      TilesProduct(GradWeightProduct(s, s.n * out_pixels, 1, 0).m, options)) {
    AddConvGradWeight(call, s, swap ? i1 : i0, swap ? i0 : i1, o, options);
    return absl::OkStatus();
  }
  // A grad_weight too small or too grouped for the tiled product: each
  // output's reduction of N * OH * OW terms split into its chunks (one
  // thread per chunk and output), then the tree (the same bits).
  const int64_t chunks = ChunksOf(s.n * out_pixels);
  if (dop == DeviceOp::kConv2dGradWeight && chunks > 1) {
    const int parts = AddScratch(call, chunks * work * int64_t{sizeof(float)});
    AddLaunch(call, DeviceOp::kConv2dGradWeightChunks, chunks * work,
              {swap ? i1 : i0, swap ? i0 : i1}, {parts})
        .conv = s;
    AddTreeSum(call, parts, 0, o, 0, chunks, work, false);
    return absl::OkStatus();
  }
  AddLaunch(call, dop, work, {swap ? i1 : i0, swap ? i0 : i1}, {o}).conv = s;
  return absl::OkStatus();
}

absl::Status PlanPool(absl::string_view name, absl::Span<const Tensor> in,
                      absl::Span<Tensor> out, const OpAttrs& a,
                      DeviceCall* call) {
  LS_ASSIGN_OR_RETURN(const sp::Pool2dShape s,
                      sp::ValidatePool2dCall(name, in, out, a));
  if (name == op::kMaxPool2dForward || name == op::kAvgPool2dForward) {
    const int x = AddIn(call, in[0]);
    const int y = AddOut(call, out[0]);
    AddLaunch(call,
              name == op::kMaxPool2dForward ? DeviceOp::kMaxPool2dForward
                                            : DeviceOp::kAvgPool2dForward,
              sp::Pool2dOutputSize(s), {x}, {y})
        .pool = s;
  } else if (name == op::kMaxPool2dGrad) {  // in {x, dy}, out {dx}
    const int x = AddIn(call, in[0]);
    const int dy = AddIn(call, in[1]);
    const int dx = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kMaxPool2dGrad, sp::Pool2dInputSize(s), {x, dy},
              {dx})
        .pool = s;
  } else {  // avg_pool2d.grad: in {dy}, out {dx}
    const int dy = AddIn(call, in[0]);
    const int dx = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kAvgPool2dGrad, sp::Pool2dInputSize(s), {dy},
              {dx})
        .pool = s;
  }
  return absl::OkStatus();
}

absl::Status PlanGlobalPool(absl::string_view name, absl::Span<const Tensor> in,
                            absl::Span<Tensor> out, DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  sp::GlobalPool2dShape s;
  const bool forward = name == op::kGlobalAvgPoolForward;
  if (forward) {
    LS_ASSIGN_OR_RETURN(s, GlobalShape(name, in[0], out[0], "x", "y"));
  } else {
    LS_ASSIGN_OR_RETURN(s, GlobalShape(name, out[0], in[0], "dx", "dy"));
  }
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  const int i = AddIn(call, in[0]);
  const int o = AddOut(call, out[0]);
  AddLaunch(
      call,
      forward ? DeviceOp::kGlobalAvgPoolForward : DeviceOp::kGlobalAvgPoolGrad,
      forward ? sp::GlobalPool2dOutputSize(s) : sp::GlobalPool2dInputSize(s),
      {i}, {o})
      .global_pool = s;
  return absl::OkStatus();
}

absl::Status PlanResize(absl::string_view name, absl::Span<const Tensor> in,
                        absl::Span<Tensor> out, DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  sp::ResizeBilinearShape s;
  const bool forward = name == op::kResizeBilinearForward;
  if (forward) {
    LS_ASSIGN_OR_RETURN(s, ResizeShape(name, in[0], out[0], "x", "y"));
  } else {
    LS_ASSIGN_OR_RETURN(s, ResizeShape(name, out[0], in[0], "dx", "dy"));
  }
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  const int i = AddIn(call, in[0]);
  const int o = AddOut(call, out[0]);
  AddLaunch(call, forward ? DeviceOp::kResizeForward : DeviceOp::kResizeGrad,
            forward ? sp::ResizeBilinearOutputSize(s)
                    : sp::ResizeBilinearInputSize(s),
            {i}, {o})
      .resize = s;
  return absl::OkStatus();
}

// sigmoid / tanh / silu / gelu / gelu_tanh: which activation `name` is
// (forward or grad), or false.
bool ActivationOf(absl::string_view name, c::Activation* act, bool* forward) {
  const struct {
    const char* forward;
    const char* grad;
    c::Activation act;
  } table[] = {
      {op::kSigmoidForward, op::kSigmoidGrad, c::Activation::kSigmoid},
      {op::kTanhForward, op::kTanhGrad, c::Activation::kTanh},
      {op::kSiluForward, op::kSiluGrad, c::Activation::kSilu},
      {op::kGeluForward, op::kGeluGrad, c::Activation::kGelu},
      {op::kGeluTanhForward, op::kGeluTanhGrad, c::Activation::kGeluTanh}};
  for (const auto& e : table) {
    if (name == e.forward || name == e.grad) {
      *act = e.act;
      *forward = name == e.forward;
      return true;
    }
  }
  return false;
}

absl::Status PlanActivation(absl::string_view name, c::Activation act,
                            bool forward, absl::Span<const Tensor> in,
                            absl::Span<Tensor> out, DeviceCall* call) {
  if (forward) {
    LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
    const Tensor* t[] = {&in[0], &out[0]};
    const absl::string_view names[] = {"x", "y"};
    LS_RETURN_IF_ERROR(ValidateSameShapeFloat(name, t, names));
    const int x = AddIn(call, in[0]);
    const int y = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kActivation, in[0].numel(), {x}, {y}).activation =
        act;
    return absl::OkStatus();
  }
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  const Tensor* t[] = {&in[0], &in[1], &out[0]};
  const absl::string_view names[] = {"x", "dy", "dx"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(name, t, names));
  const int x = AddIn(call, in[0]);
  const int dy = AddIn(call, in[1]);
  const int dx = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kActivationGrad, in[0].numel(), {x, dy}, {dx})
      .activation = act;
  return absl::OkStatus();
}

absl::Status PlanSoftmaxLast(absl::string_view name,
                             absl::Span<const Tensor> in,
                             absl::Span<Tensor> out, const OpAttrs& a,
                             DeviceCall* call) {
  const bool forward = name == op::kSoftmaxForward;
  LS_RETURN_IF_ERROR(CheckArity(name, in, forward ? 1 : 2, out, 1));
  c::RowShape s;
  if (forward) {
    const Tensor* like[] = {&out[0]};
    const absl::string_view names[] = {"x", "y"};
    LS_ASSIGN_OR_RETURN(s,
                        ValidateRows(name, in[0], like, {}, names, a, false));
  } else {
    const Tensor* like[] = {&in[1], &out[0]};
    const absl::string_view names[] = {"x", "dy", "dx"};
    LS_ASSIGN_OR_RETURN(s,
                        ValidateRows(name, in[0], like, {}, names, a, false));
  }
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  const int x = AddIn(call, in[0]);
  if (forward) {
    const int y = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kSoftmaxLast, s.rows, {x}, {y}).rows = s;
  } else {
    const int dy = AddIn(call, in[1]);
    const int dx = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kSoftmaxLastGrad, s.rows, {x, dy}, {dx}).rows = s;
  }
  return absl::OkStatus();
}

absl::Status PlanLayerNorm(absl::string_view name, absl::Span<const Tensor> in,
                           absl::Span<Tensor> out, const OpAttrs& a,
                           DeviceCall* call) {
  if (name == op::kLayerNormForward) {
    LS_RETURN_IF_ERROR(CheckArity(name, in, 3, out, 1));
    const Tensor* like[] = {&out[0]};
    const Tensor* vectors[] = {&in[1], &in[2]};
    const absl::string_view names[] = {"x", "y", "gamma", "beta"};
    LS_ASSIGN_OR_RETURN(c::RowShape s, ValidateRows(name, in[0], like, vectors,
                                                    names, a, true));
    LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
    const int x = AddIn(call, in[0]);
    const int gamma = AddIn(call, in[1]);
    const int beta = AddIn(call, in[2]);
    const int y = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kLayerNorm, s.rows, {x, gamma, beta}, {y}).rows =
        s;
    return absl::OkStatus();
  }
  if (name == op::kLayerNormGradInput) {
    LS_RETURN_IF_ERROR(CheckArity(name, in, 3, out, 1));
    const Tensor* like[] = {&in[2], &out[0]};
    const Tensor* vectors[] = {&in[1]};
    const absl::string_view names[] = {"x", "dy", "dx", "gamma"};
    LS_ASSIGN_OR_RETURN(c::RowShape s, ValidateRows(name, in[0], like, vectors,
                                                    names, a, true));
    LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
    const int x = AddIn(call, in[0]);
    const int gamma = AddIn(call, in[1]);
    const int dy = AddIn(call, in[2]);
    const int dx = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kLayerNormGradInput, s.rows, {x, gamma, dy}, {dx})
        .rows = s;
    return absl::OkStatus();
  }
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 2));
  const Tensor* like[] = {&in[1]};
  const Tensor* vectors[] = {&out[0], &out[1]};
  const absl::string_view names[] = {"x", "dy", "dgamma", "dbeta"};
  LS_ASSIGN_OR_RETURN(c::RowShape s,
                      ValidateRows(name, in[0], like, vectors, names, a, true));
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  if (out[0].SharesStorageWith(out[1])) {
    return absl::InvalidArgumentError(
        "layer_norm.grad_params: dgamma and dbeta share storage");
  }
  const int x = AddIn(call, in[0]);
  const int dy = AddIn(call, in[1]);
  const int stats = AddScratch(call, 2 * s.rows * int64_t{sizeof(float)});
  const int dgamma = AddOut(call, out[0]);
  const int dbeta = AddOut(call, out[1]);
  AddLaunch(call, DeviceOp::kLayerNormStats, s.rows, {x}, {stats}).rows = s;
  AddLaunch(call, DeviceOp::kLayerNormGradParams, s.d, {x, dy, stats},
            {dgamma, dbeta})
      .rows = s;
  return absl::OkStatus();
}

// One kBnChunks launch of `mode` (BnChunkMode) over every (chunk,
// channel), its inputs `ins`, into `parts`.
void AddBnChunks(DeviceCall* call, const c::ChannelShape& s, int mode,
                 std::initializer_list<int> ins, int parts) {
  KernelParams& p = AddLaunch(call, DeviceOp::kBnChunks,
                              ChunksOf(s.n * s.spatial) * s.c, ins, {parts});
  p.channels = s;
  p.bn_mode = mode;
}

// Training-mode batch norm's statistics, chunk by chunk: the scratch
// stats [4, C] (returned first) gets row 0 (sum x) and row 1 (dot (d, d))
// through the scratch parts [2, chunks, C] (returned second), which the
// gradients' two reductions reuse.
std::pair<int, int> AddBnStats(DeviceCall* call, const c::ChannelShape& s,
                               int x) {
  const int64_t chunks = ChunksOf(s.n * s.spatial);
  const int stats = AddScratch(call, 4 * s.c * int64_t{sizeof(float)});
  const int parts = AddScratch(call, 2 * chunks * s.c * int64_t{sizeof(float)});
  AddBnChunks(call, s, kBnSumX, {x}, parts);
  AddTreeSum(call, parts, 0, stats, 0, chunks, s.c, false);
  AddBnChunks(call, s, kBnSumSqDev, {x, stats}, parts);
  AddTreeSum(call, parts, 0, stats, s.c, chunks, s.c, false);
  return {stats, parts};
}

// A gradient's two reductions (kBnGradParams or kBnGradInput, inputs
// `ins`) chunk by chunk, then each channel's tree into y0 and y1 at float
// offsets offset0 and offset1 (CanonicalNanOf'd when `nan`).
void AddBnGradientSums(DeviceCall* call, const c::ChannelShape& s, int mode,
                       std::initializer_list<int> ins, int parts, int y0,
                       int64_t offset0, int y1, int64_t offset1, bool nan) {
  const int64_t chunks = ChunksOf(s.n * s.spatial);
  AddBnChunks(call, s, mode, ins, parts);
  AddTreeSum(call, parts, 0, y0, offset0, chunks, s.c, nan);
  AddTreeSum(call, parts, chunks * s.c, y1, offset1, chunks, s.c, nan);
}

// Batch norm: in training mode every channel's reductions run chunk by
// chunk on threads of their own, then one thread per channel adds the
// chunks with the canonical tree, then one thread per element (the same
// bits as one thread per channel, BatchNormForwardChannel and the
// gradients' channel functions, which eval mode still runs).
absl::Status PlanBatchNorm(absl::string_view name, absl::Span<const Tensor> in,
                           absl::Span<Tensor> out, const OpAttrs& a,
                           DeviceCall* call) {
  if (name == op::kBatchNormForward) {
    LS_RETURN_IF_ERROR(CheckArity(name, in, 3, out, 2));
    const Tensor* like[] = {&out[0]};
    const Tensor* vectors[] = {&in[1], &in[2]};
    const absl::string_view names[] = {"x", "y", "gamma", "beta", "running"};
    LS_ASSIGN_OR_RETURN(
        c::ChannelShape s,
        ValidateBatchNorm(name, in[0], like, vectors, out[1], names, a));
    LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
    const int x = AddIn(call, in[0]);
    const int gamma = AddIn(call, in[1]);
    const int beta = AddIn(call, in[2]);
    const int y = AddOut(call, out[0]);
    const int running = AddInOut(call, out[1]);
    if (s.eval) {
      AddLaunch(call, DeviceOp::kBatchNorm, s.c, {x, gamma, beta}, {y, running})
          .channels = s;
      return absl::OkStatus();
    }
    const int stats = AddBnStats(call, s, x).first;
    AddLaunch(call, DeviceOp::kBnOutput, s.n * s.c * s.spatial,
              {x, gamma, beta, stats}, {y})
        .channels = s;
    AddLaunch(call, DeviceOp::kBnRunning, s.c, {stats}, {running}).channels = s;
    return absl::OkStatus();
  }
  if (name == op::kBatchNormGradInput) {
    LS_RETURN_IF_ERROR(CheckArity(name, in, 4, out, 1));
    const Tensor* like[] = {&in[2], &out[0]};
    const Tensor* vectors[] = {&in[1]};
    const absl::string_view names[] = {"x", "dy", "dx", "gamma", "running"};
    LS_ASSIGN_OR_RETURN(
        c::ChannelShape s,
        ValidateBatchNorm(name, in[0], like, vectors, in[3], names, a));
    LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
    const int x = AddIn(call, in[0]);
    const int gamma = AddIn(call, in[1]);
    const int dy = AddIn(call, in[2]);
    const int running = AddIn(call, in[3]);
    const int dx = AddOut(call, out[0]);
    if (s.eval) {
      AddLaunch(call, DeviceOp::kBatchNormGradInput, s.c,
                {x, gamma, dy, running}, {dx})
          .channels = s;
      return absl::OkStatus();
    }
    const auto [stats, parts] = AddBnStats(call, s, x);
    AddBnGradientSums(call, s, kBnGradInput, {x, stats, gamma, dy}, parts,
                      stats, 2 * s.c, stats, 3 * s.c, false);
    AddLaunch(call, DeviceOp::kBnGradInput, s.n * s.c * s.spatial,
              {x, gamma, dy, stats}, {dx})
        .channels = s;
    return absl::OkStatus();
  }
  LS_RETURN_IF_ERROR(CheckArity(name, in, 3, out, 2));
  const Tensor* like[] = {&in[1]};
  const Tensor* vectors[] = {&out[0], &out[1]};
  const absl::string_view names[] = {"x", "dy", "dgamma", "dbeta", "running"};
  LS_ASSIGN_OR_RETURN(
      c::ChannelShape s,
      ValidateBatchNorm(name, in[0], like, vectors, in[2], names, a));
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  if (out[0].SharesStorageWith(out[1])) {
    return absl::InvalidArgumentError(
        "batch_norm.grad_params: dgamma and dbeta share storage");
  }
  const int x = AddIn(call, in[0]);
  const int dy = AddIn(call, in[1]);
  const int running = AddIn(call, in[2]);
  const int dgamma = AddOut(call, out[0]);
  const int dbeta = AddOut(call, out[1]);
  if (s.eval) {
    AddLaunch(call, DeviceOp::kBatchNormGradParams, s.c, {x, dy, running},
              {dgamma, dbeta})
        .channels = s;
    return absl::OkStatus();
  }
  const auto [stats, parts] = AddBnStats(call, s, x);
  AddBnGradientSums(call, s, kBnGradParams, {x, stats, dy}, parts, dgamma, 0,
                    dbeta, 0, true);
  return absl::OkStatus();
}

absl::Status PlanGradNorm(absl::string_view name, absl::Span<const Tensor> in,
                          absl::Span<Tensor> out, const OpAttrs& a,
                          DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  if (name == op::kGradNormSumSquares) {
    const Tensor* t[] = {&in[0]};
    const absl::string_view names[] = {"g"};
    LS_RETURN_IF_ERROR(ValidateSameShapeFloat(name, t, names));
    const Tensor* o[] = {&out[0]};
    const absl::string_view onames[] = {"s"};
    LS_RETURN_IF_ERROR(ValidateSameShapeFloat(name, o, onames));
    if (out[0].numel() != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "grad_norm.sum_squares: s must have one element, got %s",
          out[0].DebugString()));
    }
    // The chunks' chains on threads of their own, then the tree.
    const int64_t count = in[0].numel();
    const int64_t chunks = ChunksOf(count);
    const int g = AddIn(call, in[0]);
    const int s = AddOut(call, out[0]);
    const int parts =
        AddScratch(call, std::max<int64_t>(chunks, 1) * int64_t{sizeof(float)});
    AddLaunch(call, DeviceOp::kSumSquaresChunks, chunks, {g}, {parts}).rows.d =
        count;
    AddTreeSum(call, parts, 0, s, 0, chunks, 1, false);
    return absl::OkStatus();
  }
  const Tensor* t[] = {&in[0], &out[0]};
  const absl::string_view names[] = {"g", "y"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(name, t, names));
  if (!std::isfinite(a.scale)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "grad_norm.scale: scale is %g, must be finite", a.scale));
  }
  const int g = AddIn(call, in[0]);
  const int y = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kScale, in[0].numel(), {g}, {y}).scale = a.scale;
  return absl::OkStatus();
}

// embedding.grad_weight: the positions are sorted by id on the host (the
// ids were just validated there) and the sorted index is copied in.
absl::Status PlanEmbedding(absl::string_view name, absl::Span<const Tensor> in,
                           absl::Span<Tensor> out, DeviceCall* call) {
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  if (name == op::kEmbeddingForward) {
    LS_ASSIGN_OR_RETURN(
        c::EmbeddingShape s,
        ValidateEmbedding(name, in[0], in[1], "w", out[0], "y"));
    LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
    const int ids = AddIn(call, in[0]);
    const int w = AddIn(call, in[1]);
    const int y = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kEmbedding, s.positions * s.dim, {ids, w}, {y})
        .embedding = s;
    return absl::OkStatus();
  }
  LS_ASSIGN_OR_RETURN(
      c::EmbeddingShape s,
      ValidateEmbedding(name, in[0], out[0], "dw", in[1], "dy"));
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  auto sorted = std::make_shared<std::vector<int64_t>>(
      static_cast<size_t>(s.vocab + 1 + s.positions));
  c::SortPositionsById(s, in[0].data<int32_t>(), sorted->data(),
                       sorted->data() + s.vocab + 1);
  call->host_data.push_back(sorted);
  int64_t* offsets_host = sorted->data();
  const int offsets =
      AddBuffer(call, offsets_host, (s.vocab + 1) * int64_t{sizeof(int64_t)},
                true, false);
  const int order =
      AddBuffer(call, offsets_host + s.vocab + 1,
                std::max<int64_t>(1, s.positions) * int64_t{sizeof(int64_t)},
                s.positions > 0, false);
  const int dy = AddIn(call, in[1]);
  const int dw = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kEmbeddingGrad, s.vocab * s.dim,
            {offsets, order, dy}, {dw})
      .embedding = s;
  return absl::OkStatus();
}

absl::Status PlanDropout(absl::string_view name, absl::Span<const Tensor> in,
                         absl::Span<Tensor> out, const OpAttrs& a,
                         DeviceCall* call) {
  if (name == op::kDropoutForward) {
    LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 2));
    const Tensor* t[] = {&in[0], &out[0], &out[1]};
    const absl::string_view names[] = {"x", "y", "mask"};
    LS_ASSIGN_OR_RETURN(c::DropoutParams p,
                        ValidateDropout(name, t, names, a, /*forward=*/true));
    LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
    if (out[0].SharesStorageWith(out[1])) {
      return absl::InvalidArgumentError(
          "dropout.forward: y and mask share storage");
    }
    const int x = AddIn(call, in[0]);
    const int y = AddOut(call, out[0]);
    const int mask = AddOut(call, out[1]);
    AddLaunch(call, DeviceOp::kDropout, in[0].numel(), {x}, {y, mask}).dropout =
        p;
    return absl::OkStatus();
  }
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  const Tensor* t[] = {&in[0], &in[1], &out[0]};
  const absl::string_view names[] = {"mask", "dy", "dx"};
  LS_RETURN_IF_ERROR(
      ValidateDropout(name, t, names, a, /*forward=*/false).status());
  const int mask = AddIn(call, in[0]);
  const int dy = AddIn(call, in[1]);
  const int dx = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kDropoutGrad, in[0].numel(), {mask, dy}, {dx});
  return absl::OkStatus();
}

// ---- graph primitives of op set v3 (validators shared with the CPU) -------

// Host data (sorted positions, reduction offsets) copied in as a buffer;
// the call keeps it alive.
int AddHostInts(DeviceCall* call, std::vector<int64_t> values) {
  auto held = std::make_shared<std::vector<int64_t>>(std::move(values));
  call->host_data.push_back(held);
  const int64_t bytes =
      static_cast<int64_t>(held->size()) * int64_t{sizeof(int64_t)};
  return AddBuffer(call, held->data(), bytes, bytes > 0, false);
}

absl::Status PlanGraphData(absl::string_view name, absl::Span<const Tensor> in,
                           absl::Span<Tensor> out, DeviceCall* call) {
  if (name == op::kConstant || name == op::kParameterForward ||
      name == op::kParameterGrad) {
    LS_RETURN_IF_ERROR(ValidateCopyCall(in, out));
    const int x = AddIn(call, in[0]);
    const int y = AddOut(call, out[0]);
    AddCopy(call, x, y, in[0].bytes());
    return absl::OkStatus();
  }
  if (name == op::kGatherForward || name == op::kSliceForward) {
    LS_ASSIGN_OR_RETURN(const c::GatherShape s,
                        ValidateGatherForwardCall(name, in, out));
    const int x = AddIn(call, in[0]);
    const int ids = AddIn(call, in[1]);
    const int y = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kGather, s.a * s.p * s.b, {x, ids}, {y})
        .graph.gather = s;
    return absl::OkStatus();
  }
  if (name == op::kGatherGrad) {
    LS_ASSIGN_OR_RETURN(const c::GatherShape s,
                        ValidateGatherGradCall(name, in, out));
    // EMBEDDING's sorted segments, sorted on the host as for
    // embedding.grad_weight.
    std::vector<int64_t> offsets(static_cast<size_t>(s.v + 1));
    std::vector<int64_t> order(static_cast<size_t>(s.p));
    c::SortPositionsById(c::EmbeddingShape{s.p, s.v, s.b},
                         in[0].data<int32_t>(), offsets.data(), order.data());
    const int off = AddHostInts(call, std::move(offsets));
    const int ord = AddHostInts(call, std::move(order));
    const int dy = AddIn(call, in[1]);
    const int dx = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kGatherGrad, s.a * s.v * s.b, {off, ord, dy},
              {dx})
        .graph.gather = s;
    return absl::OkStatus();
  }
  if (name == op::kSliceGrad) {
    LS_ASSIGN_OR_RETURN(const c::GatherShape s,
                        ValidateGatherGradCall(name, in, out));
    std::vector<int64_t> source(static_cast<size_t>(s.v), -1);
    const int32_t* ids = in[0].data<int32_t>();
    for (int64_t p = 0; p < s.p; ++p) source[ids[p]] = p;
    const int src = AddHostInts(call, std::move(source));
    const int dy = AddIn(call, in[1]);
    const int dx = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kSliceGrad, s.a * s.v * s.b, {src, dy}, {dx})
        .graph.gather = s;
    return absl::OkStatus();
  }
  // concat.forward / concat.grad: one block copy per part.
  LS_ASSIGN_OR_RETURN(const std::vector<int64_t> offsets,
                      ValidateConcatCall(name, in, out));
  const bool forward = name == op::kConcatForward;
  const Tensor& whole = forward ? out[0] : in[0];
  const int64_t rows = whole.dim(0), c_dim = whole.dim(1), b = whole.dim(2);
  const int w = forward ? AddOut(call, out[0]) : AddIn(call, in[0]);
  const size_t parts = forward ? in.size() : out.size();
  for (size_t k = 0; k < parts; ++k) {
    const int64_t ck = forward ? in[k].dim(1) : out[k].dim(1);
    const int part = forward ? AddIn(call, in[k]) : AddOut(call, out[k]);
    GraphParams g;
    g.rows = rows;
    g.width = ck * b;
    g.src_row = forward ? ck * b : c_dim * b;
    g.dst_row = forward ? c_dim * b : ck * b;
    g.src_off = forward ? 0 : offsets[k] * b;
    g.dst_off = forward ? offsets[k] * b : 0;
    AddLaunch(call, DeviceOp::kBlockCopy, g.rows * g.width,
              {forward ? part : w}, {forward ? w : part})
        .graph = g;
  }
  return absl::OkStatus();
}

// The reduction of the y-shaped buffer `t` (shape `y`) into output buffer
// `x` of shape `x_shape`: one canonical sum per x element.
void AddSumTo(DeviceCall* call, int t, int x, absl::Span<const int64_t> y,
              absl::Span<const int64_t> x_shape, int64_t x_numel, bool mean,
              float count) {
  SumToPlan p = PlanSumTo(y, x_shape);
  GraphParams g;
  g.identity = p.identity;
  g.sum_n = p.n;
  g.mean = mean;
  g.count = count;
  const int base = AddHostInts(call, std::move(p.out_base));
  const int terms = AddHostInts(call, std::move(p.term_offset));
  AddLaunch(call, DeviceOp::kSumTo, x_numel, {t, base, terms}, {x}).graph = g;
}

absl::Status PlanGraphElementwise(absl::string_view name,
                                  absl::Span<const Tensor> in,
                                  absl::Span<Tensor> out, const OpAttrs& a,
                                  DeviceCall* call) {
  GraphParams g;
  g.kind = a.graph_kind;
  if (name == op::kBinaryForward || name == op::kCompare) {
    const bool binary = name == op::kBinaryForward;
    LS_ASSIGN_OR_RETURN(g.bcast, binary ? ValidateBinaryForwardCall(in, out, a)
                                        : ValidateCompareCall(in, out, a));
    const int x0 = AddIn(call, in[0]);
    const int x1 = AddIn(call, in[1]);
    const int y = AddOut(call, out[0]);
    AddLaunch(call, binary ? DeviceOp::kBinary : DeviceOp::kCompare,
              g.bcast.numel, {x0, x1}, {y})
        .graph = g;
    return absl::OkStatus();
  }
  if (name == op::kWhereForward) {
    LS_ASSIGN_OR_RETURN(g.bcast, ValidateWhereForwardCall(in, out));
    const int cond = AddIn(call, in[0]);
    const int x0 = AddIn(call, in[1]);
    const int x1 = AddIn(call, in[2]);
    const int y = AddOut(call, out[0]);
    AddLaunch(call, DeviceOp::kWhere, g.bcast.numel, {cond, x0, x1}, {y})
        .graph = g;
    return absl::OkStatus();
  }
  if (name == op::kBinaryGrad || name == op::kWhereGrad) {
    const bool binary = name == op::kBinaryGrad;
    LS_ASSIGN_OR_RETURN(g.bcast, binary ? ValidateBinaryGradCall(in, out, a)
                                        : ValidateWhereGradCall(in, out));
    const int64_t terms_bytes = g.bcast.numel * int64_t{sizeof(float)};
    const int ta = AddScratch(call, terms_bytes);
    const int tb = AddScratch(call, terms_bytes);
    if (binary) {
      const int x0 = AddIn(call, in[0]);
      const int x1 = AddIn(call, in[1]);
      const int dy = AddIn(call, in[2]);
      AddLaunch(call, DeviceOp::kBinaryGradTerms, g.bcast.numel, {x0, x1, dy},
                {ta, tb})
          .graph = g;
    } else {
      const int cond = AddIn(call, in[0]);
      const int dy = AddIn(call, in[1]);
      AddLaunch(call, DeviceOp::kWhereGradTerms, g.bcast.numel, {cond, dy},
                {ta, tb})
          .graph = g;
    }
    const std::vector<int64_t> y(g.bcast.dims, g.bcast.dims + g.bcast.rank);
    const int da = AddOut(call, out[0]);
    const int db = AddOut(call, out[1]);
    AddSumTo(call, ta, da, y, out[0].shape(), out[0].numel(), false, 1.0f);
    AddSumTo(call, tb, db, y, out[1].shape(), out[1].numel(), false, 1.0f);
    return absl::OkStatus();
  }
  if (name == op::kUnaryForward || name == op::kUnaryGrad) {
    const bool grad = name == op::kUnaryGrad;
    LS_RETURN_IF_ERROR(ValidateUnaryCall(grad, in, out, a));
    const int x = AddIn(call, in[0]);
    const int y = AddOut(call, out[0]);
    if (grad) {
      const int dy = AddIn(call, in[1]);
      AddLaunch(call, DeviceOp::kUnaryGrad, in[0].numel(), {x, dy}, {y}).graph =
          g;
    } else {
      AddLaunch(call, DeviceOp::kUnary, in[0].numel(), {x}, {y}).graph = g;
    }
    return absl::OkStatus();
  }
  if (name == op::kReduceForward) {
    LS_ASSIGN_OR_RETURN(const ReduceCall r,
                        ValidateReduceForwardCall(in, out, a));
    const int x = AddIn(call, in[0]);
    const int y = AddOut(call, out[0]);
    AddSumTo(call, x, y, in[0].shape(), r.kept, out[0].numel(), r.mean,
             r.count);
    return absl::OkStatus();
  }
  // reduce.grad
  LS_ASSIGN_OR_RETURN(const ReduceCall r, ValidateReduceGradCall(in, out, a));
  g.bcast = r.grad;
  g.mean = r.mean;
  g.count = r.count;
  const int dy = AddIn(call, in[0]);
  const int dx = AddOut(call, out[0]);
  AddLaunch(call, DeviceOp::kReduceGrad, r.grad.numel, {dy}, {dx}).graph = g;
  return absl::OkStatus();
}

absl::Status Plan(absl::string_view name, absl::Span<const Tensor> in,
                  absl::Span<Tensor> out, const OpAttrs& a,
                  const PlanOptions& options, DeviceCall* call) {
  if (IsIn(name, GraphDataOpNames())) {
    return PlanGraphData(name, in, out, call);
  }
  if (IsIn(name, GraphElementwiseOpNames())) {
    return PlanGraphElementwise(name, in, out, a, call);
  }
  if (name == op::kDropoutForward || name == op::kDropoutGrad) {
    return PlanDropout(name, in, out, a, call);
  }
  if (name == op::kEmbeddingForward || name == op::kEmbeddingGradWeight) {
    return PlanEmbedding(name, in, out, call);
  }
  if (name == op::kGradNormSumSquares || name == op::kGradNormScale) {
    return PlanGradNorm(name, in, out, a, call);
  }
  if (name == op::kBatchNormForward || name == op::kBatchNormGradInput ||
      name == op::kBatchNormGradParams) {
    return PlanBatchNorm(name, in, out, a, call);
  }
  c::Activation act;
  bool forward = false;
  if (ActivationOf(name, &act, &forward)) {
    return PlanActivation(name, act, forward, in, out, call);
  }
  if (name == op::kSoftmaxForward || name == op::kSoftmaxGrad) {
    return PlanSoftmaxLast(name, in, out, a, call);
  }
  if (name == op::kLayerNormForward || name == op::kLayerNormGradInput ||
      name == op::kLayerNormGradParams) {
    return PlanLayerNorm(name, in, out, a, call);
  }
  if (name == op::kDenseForward || name == op::kDenseGradInput ||
      name == op::kDenseGradWeight) {
    return PlanDense(name, in, out, a, options, call);
  }
  if (name == op::kMatMulForward || name == op::kMatMulGrad) {
    return PlanMatMul(name, in, out, a, options, call);
  }
  if (name == op::kTranspose) return PlanTranspose(in, out, a, call);
  if (name == op::kReshape) return PlanReshape(in, out, call);
  if (name == op::kBiasAddForward) return PlanBiasAdd(in, out, call);
  if (name == op::kBiasAddGrad) return PlanBiasAddGrad(in, out, call);
  if (name == op::kReluForward) return PlanRelu(in, out, call);
  if (name == op::kReluGrad) return PlanReluGrad(in, out, call);
  if (name == op::kFlatten) return PlanFlatten(in, out, call);
  if (name == op::kAddForward) return PlanAdd(in, out, call);
  if (name == op::kAddGrad) return PlanAddGrad(in, out, call);
  if (name == op::kSoftmaxXentForward) return PlanSoftmaxForward(in, out, call);
  if (name == op::kSoftmaxXentGrad) return PlanSoftmaxGrad(in, out, call);
  if (name == op::kSgdUpdate || name == op::kMomentumUpdate ||
      name == op::kAdamUpdate || name == op::kAdamWUpdate) {
    return PlanOptimizer(name, in, out, a, call);
  }
  if (name == op::kConv2dForward || name == op::kConv2dGradInput ||
      name == op::kConv2dGradWeight || name == op::kConvTranspose2dForward ||
      name == op::kConvTranspose2dGradInput ||
      name == op::kConvTranspose2dGradWeight) {
    return PlanConv(name, in, out, a, options, call);
  }
  if (name == op::kMaxPool2dForward || name == op::kMaxPool2dGrad ||
      name == op::kAvgPool2dForward || name == op::kAvgPool2dGrad) {
    return PlanPool(name, in, out, a, call);
  }
  if (name == op::kGlobalAvgPoolForward || name == op::kGlobalAvgPoolGrad) {
    return PlanGlobalPool(name, in, out, call);
  }
  if (name == op::kResizeBilinearForward || name == op::kResizeBilinearGrad) {
    return PlanResize(name, in, out, call);
  }
  return absl::NotFoundError(
      absl::StrFormat("cuda: no CANONICAL kernel for op \"%s\"", name));
}

}  // namespace

int64_t BlocksFor(const LaunchConfig& config, int64_t work) {
  if (config.blocks > 0) return config.blocks;
  const int64_t tpb =
      config.threads_per_block > 0 ? config.threads_per_block : 256;
  int64_t blocks = (work + tpb - 1) / tpb;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxAutoBlocks) blocks = kMaxAutoBlocks;
  return blocks;
}

absl::Status CheckDeviceLaunchConfig(const LaunchConfig& config,
                                     absl::string_view what) {
  if (config.threads_per_block < kWarpSize ||
      config.threads_per_block > kMaxThreadsPerBlock ||
      config.threads_per_block % kWarpSize != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: launch config threads_per_block = %d: must be a multiple of %d "
        "in [%d, %d]",
        what, config.threads_per_block, kWarpSize, kWarpSize,
        kMaxThreadsPerBlock));
  }
  if (config.blocks < 0 || config.blocks > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: launch config blocks = %d: must be 0 (automatic) or in [1, %d]",
        what, config.blocks, 0x7fffffff));
  }
  return absl::OkStatus();
}

std::vector<std::string> CudaCanonicalOpNames() {
  std::vector<std::string> ops = AllOpNames();
  for (std::string& op : GraphDataOpNames()) ops.push_back(std::move(op));
  return ops;
}

LaunchGrid GridFor(const KernelParams& params, const LaunchConfig& config) {
  LaunchGrid g;
  if (params.op == DeviceOp::kTiledMatMul) {
    g.threads_per_block = PlannedGemmTile::kThreads;
    g.blocks = config.blocks > 0
                   ? config.blocks
                   : std::max<int64_t>(
                         1, std::min<int64_t>(params.work, kMaxAutoBlocks));
    return g;
  }
  g.blocks = BlocksFor(config, params.work);
  g.threads_per_block = config.threads_per_block;
  return g;
}

absl::StatusOr<DeviceCall> PlanCanonicalOp(absl::string_view op,
                                           absl::Span<const Tensor> inputs,
                                           absl::Span<Tensor> outputs,
                                           const OpAttrs& attrs,
                                           const PlanOptions& options) {
  DeviceCall call;
  call.op = std::string(op);
  LS_RETURN_IF_ERROR(Plan(op, inputs, outputs, attrs, options, &call));
  return call;
}

absl::Status RunEmulated(const DeviceCall& call, const LaunchConfig& config) {
  if (config.blocks < 0 || config.threads_per_block < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad launch config (%d blocks of %d threads)",
                        call.op, config.blocks, config.threads_per_block));
  }
  // "Device" memory: separate from the Tensors, as on a GPU. Filled with a
  // pattern so that an output the kernel forgets to write shows up. In a
  // resident run a tensor's is its EmulatedMirror, kept between calls.
  const bool resident = ActiveResidentRun() != nullptr;
  std::vector<std::vector<unsigned char>> mem(call.buffers.size());
  std::vector<unsigned char*> device(call.buffers.size());
  for (size_t b = 0; b < call.buffers.size(); ++b) {
    const CallBuffer& cb = call.buffers[b];
    if (resident && cb.is_tensor && cb.bytes > 0) {
      LS_ASSIGN_OR_RETURN(device[b], EmulatedMirror::Prepare(cb));
      continue;
    }
    mem[b].assign(static_cast<size_t>(cb.bytes) + 16, 0xA5);
    device[b] = mem[b].data();
    if (cb.copy_in && cb.bytes > 0) {
      std::memcpy(mem[b].data(), cb.host, cb.bytes);
    }
  }
  for (const Launch& l : call.launches) {
    KernelParams p = l.params;
    for (int k = 0; k < kMaxKernelBuffers; ++k) {
      p.in[k] =
          l.in_buf[k] >= 0 ? device[l.in_buf[k]] + l.in_offset[k] : nullptr;
      p.out[k] =
          l.out_buf[k] >= 0 ? device[l.out_buf[k]] + l.out_offset[k] : nullptr;
    }
    const LaunchGrid grid = GridFor(p, config);
    if (p.op == DeviceOp::kTiledMatMul) {
      if (!WithGemmConfig(p.gemm_config, [&](auto tile) {
            EmulateTiledGemm<decltype(tile)>(
                p.batched_matmul, static_cast<const float*>(p.in[0]),
                static_cast<const float*>(p.in[1]),
                static_cast<float*>(p.out[0]), static_cast<float*>(p.out[1]),
                grid.blocks);
          })) {
        return absl::InternalError(
            absl::StrFormat("%s: tiled GEMM launch of unknown configuration %d",
                            call.op, p.gemm_config));
      }
      continue;
    }
    const int64_t threads = grid.blocks * grid.threads_per_block;
    for (int64_t t = 0; t < threads; ++t) RunThread(p, t, threads);
  }
  for (size_t b = 0; b < call.buffers.size(); ++b) {
    const CallBuffer& cb = call.buffers[b];
    if (!cb.copy_out || cb.bytes == 0) continue;
    if (resident && cb.is_tensor) {
      cb.tensor.SetMirrorState(MirrorState::kMirrorNewer);
    } else {
      std::memcpy(cb.host, mem[b].data(), cb.bytes);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<unsigned char*> EmulatedMirror::Prepare(const CallBuffer& cb) {
  LS_ASSIGN_OR_RETURN(
      EmulatedMirror * m,
      PrepareResidentMirror<EmulatedMirror>(
          cb.tensor, cb.bytes, cb.copy_in,
          [](int64_t bytes) -> absl::StatusOr<std::unique_ptr<EmulatedMirror>> {
            return std::make_unique<EmulatedMirror>(bytes);
          },
          [](EmulatedMirror* mirror, const void* host, int64_t bytes) {
            std::memcpy(mirror->bytes_.data(), host,
                        static_cast<size_t>(bytes));
            return absl::OkStatus();
          }));
  return m->bytes_.data();
}

EmulatedMirror::EmulatedMirror(int64_t bytes)
    : bytes_(static_cast<size_t>(bytes) + 16, 0xA5) {}

absl::Status EmulatedMirror::CopyToHost(void* host) {
  const size_t n = bytes_.size() - 16;
  std::memcpy(host, bytes_.data(), n);
  if (ResidencyCounters* c = ActiveResidentRun()) {
    ++c->downloads;
    c->download_bytes += static_cast<int64_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<hash::FingerprintAndStatsResult>
EmulatedMirror::FingerprintAndStats(hash::DtypeCode dtype,
                                    absl::Span<const int64_t> shape,
                                    size_t size) {
  if (ResidencyCounters* c = ActiveResidentRun()) ++c->mirror_fingerprints;
  return hash::FingerprintAndStats(dtype, shape, bytes_.data(), size);
}

absl::StatusOr<hash::Fingerprint> EmulatedMirror::HashBytes(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, size_t size) {
  if (ResidencyCounters* c = ActiveResidentRun()) ++c->mirror_fingerprints;
  return hash::HashTensorBytes(dtype, shape, bytes_.data(), size);
}

absl::StatusOr<size_t> EmulatedMirror::QueueFingerprintAndStats(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, size_t size) {
  LS_ASSIGN_OR_RETURN(EmulatedFingerprintQueue * q,
                      ActiveFingerprintQueueOf<EmulatedFingerprintQueue>());
  LS_ASSIGN_OR_RETURN(
      const hash::FingerprintAndStatsResult r,
      hash::FingerprintAndStats(dtype, shape, bytes_.data(), size));
  if (ResidencyCounters* c = ActiveResidentRun()) {
    ++c->mirror_fingerprints;
    ++c->queued_fingerprints;
  }
  return q->Push(r);
}

absl::Status EmulatedFingerprintQueue::Collect(
    std::vector<hash::FingerprintAndStatsResult>* out) {
  out->insert(out->end(), results_.begin(), results_.end());
  results_.clear();
  return absl::OkStatus();
}

std::vector<uint64_t> EmulateLeafHashes(const void* bytes, uint64_t size,
                                        const LaunchConfig& config) {
  std::vector<uint64_t> leaves(NumDeviceLeaves(size), 0);
  const int64_t threads =
      BlocksFor(config, static_cast<int64_t>(leaves.size())) *
      config.threads_per_block;
  for (int64_t t = 0; t < threads; ++t) {
    LeafHashThread(static_cast<const unsigned char*>(bytes), size,
                   leaves.data(), t, threads);
  }
  return leaves;
}

LeafHashesAndStats EmulateLeafHashesAndStats(const void* bytes, uint64_t size,
                                             const LaunchConfig& config) {
  LeafHashesAndStats out;
  const uint64_t leaves = NumDeviceLeaves(size);
  out.leaf_hashes.assign(leaves, 0);
  out.stats.assign(leaves, hash::portable::EmptyStatsPartial());
  const int64_t threads = BlocksFor(config, static_cast<int64_t>(leaves)) *
                          config.threads_per_block;
  for (int64_t t = 0; t < threads; ++t) {
    LeafHashAndStatsThread(static_cast<const unsigned char*>(bytes), size,
                           out.leaf_hashes.data(), out.stats.data(), t,
                           threads);
  }
  return out;
}

namespace {

// Zeroed results for the leaves of `size` bytes (statistics partials only
// with_stats); INVALID_ARGUMENT naming `what` for statistics of a size not
// a multiple of 4.
absl::StatusOr<LeafHashesAndStats> EmptyLeafResults(absl::string_view what,
                                                    uint64_t size,
                                                    bool with_stats) {
  if (with_stats && size % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: size = %d: statistics need a multiple of 4 bytes", what, size));
  }
  const uint64_t leaves = NumDeviceLeaves(size);
  LeafHashesAndStats out;
  out.leaf_hashes.assign(leaves, 0);
  if (with_stats) out.stats.assign(leaves, hash::portable::EmptyStatsPartial());
  return out;
}

}  // namespace

absl::StatusOr<LeafHashesAndStats> EmulateLeafHashesWarp(
    const void* bytes, uint64_t size, bool with_stats,
    const LaunchConfig& config, int blocks_per_load) {
  LS_RETURN_IF_ERROR(CheckDeviceLaunchConfig(config, "EmulateLeafHashesWarp"));
  if (blocks_per_load != kLeafBlocksPerLoad &&
      blocks_per_load != kFewLeavesBlocksPerLoad) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "EmulateLeafHashesWarp: blocks_per_load = %d: the leaf kernel is "
        "built for %d and %d",
        blocks_per_load, kLeafBlocksPerLoad, kFewLeavesBlocksPerLoad));
  }
  LS_ASSIGN_OR_RETURN(
      LeafHashesAndStats out,
      EmptyLeafResults("EmulateLeafHashesWarp", size, with_stats));
  const uint64_t leaves = out.leaf_hashes.size();
  const int64_t warps =
      BlocksFor(config, static_cast<int64_t>(leaves) * kWarpSize) *
      config.threads_per_block / kWarpSize;
  auto warp = std::make_unique<EmulatedWarp<WarpHashLane>>();
  for (int64_t w = 0; w < warps; ++w) {
    const auto* in = static_cast<const unsigned char*>(bytes);
    uint64_t* hashes = out.leaf_hashes.data();
    hash::portable::StatsPartial* stats =
        with_stats ? out.stats.data() : nullptr;
    if (blocks_per_load == kFewLeavesBlocksPerLoad) {
      LeafHashAndStatsWarp<kFewLeavesBlocksPerLoad>(*warp, in, size, hashes,
                                                    stats, nullptr, w, warps);
    } else {
      LeafHashAndStatsWarp<kLeafBlocksPerLoad>(*warp, in, size, hashes, stats,
                                               nullptr, w, warps);
    }
  }
  return out;
}

int64_t LeafBlockGrid(const LaunchConfig& config, uint64_t leaves) {
  return BlocksFor({config.blocks, kLeafBlockThreads},
                   static_cast<int64_t>(leaves) * kLeafBlockThreads);
}

namespace {

// LeafHashAndStatsBlock over every block of LeafBlockGrid(config, leaves),
// one block after another.
void RunEmulatedLeafBlocks(const void* bytes, uint64_t size,
                           const LaunchConfig& config, uint64_t* leaf_hashes,
                           hash::portable::StatsPartial* stats,
                           unsigned char* combine_input) {
  const int64_t blocks = LeafBlockGrid(config, NumDeviceLeaves(size));
  EmulatedBlock<WarpHashLane, kLeafBlockWarps> block;
  auto shared = std::make_unique<LeafBlockShared>();
  for (int64_t b = 0; b < blocks; ++b) {
    LeafHashAndStatsBlock(block, *shared,
                          static_cast<const unsigned char*>(bytes), size,
                          leaf_hashes, stats, combine_input, b, blocks);
  }
}

}  // namespace

absl::StatusOr<LeafHashesAndStats> EmulateLeafHashesBlock(
    const void* bytes, uint64_t size, bool with_stats,
    const LaunchConfig& config) {
  LS_RETURN_IF_ERROR(CheckDeviceLaunchConfig(config, "EmulateLeafHashesBlock"));
  LS_ASSIGN_OR_RETURN(
      LeafHashesAndStats out,
      EmptyLeafResults("EmulateLeafHashesBlock", size, with_stats));
  RunEmulatedLeafBlocks(bytes, size, config, out.leaf_hashes.data(),
                        with_stats ? out.stats.data() : nullptr, nullptr);
  return out;
}

absl::StatusOr<DeviceLeafKernel> ParseDeviceLeafKernel(absl::string_view name) {
  for (const DeviceLeafKernel k :
       {DeviceLeafKernel::kWarp, DeviceLeafKernel::kBlock,
        DeviceLeafKernel::kAuto}) {
    if (name == DeviceLeafKernelName(k)) return k;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "LOCKSTEP_CUDA_LEAF_KERNEL = \"%s\": the leaf kernel is one of warp, "
      "block or auto",
      name));
}

const char* DeviceLeafKernelName(DeviceLeafKernel kernel) {
  switch (kernel) {
    case DeviceLeafKernel::kWarp:
      return "warp";
    case DeviceLeafKernel::kBlock:
      return "block";
    case DeviceLeafKernel::kAuto:
      return "auto";
  }
  return "warp";
}

namespace {

// A process-wide switch kept in `choice` as an int, -1 until made: the
// value last stored (Set...), else the one the environment variable
// `env_name` gives through `parse` (read once; a value `parse` refuses is
// reported on stderr and `fallback` used), else `fallback`. A concurrent
// store wins over the environment.
template <class T, class Parse>
T ProcessChoice(std::atomic<int>& choice, const char* env_name, Parse parse,
                T fallback, const char* fallback_name) {
  const int chosen = choice.load(std::memory_order_acquire);
  if (chosen >= 0) return static_cast<T>(chosen);
  T value = fallback;
  if (const char* env = std::getenv(env_name);
      env != nullptr && env[0] != '\0') {
    const absl::StatusOr<T> parsed = parse(env);
    if (parsed.ok()) {
      value = *parsed;
    } else {
      std::fprintf(stderr, "lockstep: %s; using %s\n",
                   std::string(parsed.status().message()).c_str(),
                   fallback_name);
    }
  }
  int expected = -1;
  choice.compare_exchange_strong(expected, static_cast<int>(value),
                                 std::memory_order_acq_rel);
  return static_cast<T>(choice.load(std::memory_order_acquire));
}

std::atomic<int>& LeafKernelChoice() {
  static std::atomic<int> choice{-1};
  return choice;
}

std::atomic<int>& HashStreamChoice() {  // 0 off, 1 on
  static std::atomic<int> choice{-1};
  return choice;
}

}  // namespace

DeviceLeafKernel CurrentDeviceLeafKernel() {
  return ProcessChoice(LeafKernelChoice(), "LOCKSTEP_CUDA_LEAF_KERNEL",
                       ParseDeviceLeafKernel, DeviceLeafKernel::kWarp, "warp");
}

void SetDeviceLeafKernel(DeviceLeafKernel kernel) {
  LeafKernelChoice().store(static_cast<int>(kernel), std::memory_order_release);
}

absl::StatusOr<bool> ParseDeviceHashStream(absl::string_view name) {
  if (name == "on") return true;
  if (name == "off") return false;
  return absl::InvalidArgumentError(absl::StrFormat(
      "LOCKSTEP_CUDA_HASH_STREAM = \"%s\": the hash stream is on or off",
      name));
}

bool CurrentDeviceHashStream() {
  return ProcessChoice(HashStreamChoice(), "LOCKSTEP_CUDA_HASH_STREAM",
                       ParseDeviceHashStream, false, "off");
}

void SetDeviceHashStream(bool on) {
  HashStreamChoice().store(on ? 1 : 0, std::memory_order_release);
}

static_assert(kMaxHeaderBytes == 3 + 8 * hash::kMaxRank,
              "kMaxHeaderBytes is the header of a tensor of the largest rank");

absl::StatusOr<TensorHeaderArg> DeviceHeaderArg(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape) {
  LS_ASSIGN_OR_RETURN(const std::vector<uint8_t> header,
                      hash::EncodeTensorHeader(dtype, shape));
  if (header.size() > kMaxHeaderBytes) {  // not reached: rank is checked
    return absl::InvalidArgumentError(absl::StrFormat(
        "shape: its encoded header is %d bytes, over the device limit of %d",
        header.size(), kMaxHeaderBytes));
  }
  TensorHeaderArg arg;
  arg.len = static_cast<uint32_t>(header.size());
  std::memset(arg.bytes, 0, sizeof(arg.bytes));
  std::memcpy(arg.bytes, header.data(), header.size());
  return arg;
}

absl::StatusOr<hash::FingerprintAndStatsResult> EmulateDeviceFingerprint(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    size_t size, bool with_stats, const LaunchConfig& config, LeafBody body) {
  if (with_stats && dtype != hash::DtypeCode::kFloat32) {
    return absl::InvalidArgumentError(
        "dtype: statistics are defined for float32 only");
  }
  if (body != LeafBody::kOneThread) {
    LS_RETURN_IF_ERROR(
        CheckDeviceLaunchConfig(config, "EmulateDeviceFingerprint"));
  }
  const uint64_t leaves = NumDeviceLeaves(size);
  LS_RETURN_IF_ERROR(hash::CheckTensorSize(dtype, shape, size));
  LS_ASSIGN_OR_RETURN(const TensorHeaderArg header,
                      DeviceHeaderArg(dtype, shape));
  std::vector<unsigned char> scratch(header.len + 8 * leaves);
  hash::portable::Hash128 h;
  hash::portable::StatsPartial total = hash::portable::EmptyStatsPartial();
  if (body != LeafBody::kOneThread) {
    std::vector<uint64_t> leaf_hashes(leaves, 0);
    std::vector<hash::portable::StatsPartial> stats(
        with_stats ? leaves : 0, hash::portable::EmptyStatsPartial());
    auto warp = std::make_unique<EmulatedWarp<WarpHashLane>>();
    if (body == LeafBody::kBlock) {
      RunEmulatedLeafBlocks(bytes, size, config, leaf_hashes.data(),
                            with_stats ? stats.data() : nullptr,
                            scratch.data() + header.len);
    } else {
      const int64_t warps =
          BlocksFor(config, static_cast<int64_t>(leaves) * kWarpSize) *
          config.threads_per_block / kWarpSize;
      for (int64_t w = 0; w < warps; ++w) {
        LeafHashAndStatsWarp(*warp, static_cast<const unsigned char*>(bytes),
                             size, leaf_hashes.data(),
                             with_stats ? stats.data() : nullptr,
                             scratch.data() + header.len, w, warps);
      }
    }
    // The header's room holds whatever the device's scratch held before:
    // the combination writes the header there itself, as on the device.
    std::fill(scratch.begin(), scratch.begin() + header.len, 0xa5);
    if (body == LeafBody::kBlock && CombinesInLeafBlock(leaves, header.len)) {
      // The block form's leaf kernel combines a one-leaf tensor itself,
      // after a barrier (LeafHashBlockKernel).
      EmulatedBlock<WarpHashLane, kLeafBlockWarps> block;
      CombineOneLeafInBlock(block, header, scratch.data(),
                            with_stats ? stats.data() : nullptr, &h, &total);
    } else {
      CombineLeavesWarp(*warp, header, scratch.data(), scratch.size(), leaves,
                        with_stats ? stats.data() : nullptr, &h, &total);
    }
  } else {
    std::copy(header.bytes, header.bytes + header.len, scratch.begin());
    LeafHashesAndStats leaf;
    if (with_stats) {
      leaf = EmulateLeafHashesAndStats(bytes, size, config);
    } else {
      leaf.leaf_hashes = EmulateLeafHashes(bytes, size, config);
    }
    CombineLeavesThread(scratch.data(), header.len, leaf.leaf_hashes.data(),
                        leaves, with_stats ? leaf.stats.data() : nullptr, &h,
                        &total);
  }
  hash::FingerprintAndStatsResult r;
  r.fingerprint.hi = h.hi;
  r.fingerprint.lo = h.lo;
  if (with_stats) r.stats = hash::CombineBlockStats({total});
  return r;
}

}  // namespace lockstep::kernels::cuda
