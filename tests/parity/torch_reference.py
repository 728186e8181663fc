#!/usr/bin/python3
"""PyTorch float64 reference for Lockstep's CANONICAL float32 training.

For one model (model.json + config.json) and a Lockstep dump of run 0
(`lockstep-worker run --dump=all`), recomputes every step in float64 with
PyTorch -- forward, backward (autograd), gradient clipping, optimizer update
(torch.optim) -- and compares every dumped tensor with its float64
counterpart by relative L2 error against the per-role bounds below
(docs/parity.md derives them).

What comes from the dump, so that data and initialisation are identical by
construction: the initial parameters (a separate one-step dump whose update
is a no-op, see parity.py), each step's input batch and labels, and each
DROPOUT layer's keep/drop pattern. Everything else -- including every
parameter after the first step -- is the float64 trajectory's own: it is
never re-seeded from Lockstep's float32 values.

Adding an op: write one function `op_xxx(layer, inputs, params, ctx)`
returning the output tensor, register it in OPS (parameters arrive as
params["WEIGHT"] / params["BIAS"], as the dump names them), and give it an
error family in local_check.FAMILY. A model with an op that is not in OPS
fails with "unsupported op X".
"""

import glob
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

DT = torch.float64


def f32(x):
    """A proto `float` field as the float32 value the worker reads."""
    return float(np.float32(x))


# --------------------------------------------------------------------------
# Ops. Each takes (layer json, list of input tensors, {"WEIGHT": t, "BIAS":
# t} of that layer's parameters, StepContext) and returns the output.
# --------------------------------------------------------------------------


def op_dense(layer, x, p, ctx):
    d = layer.get("dense", {})
    a = x[0] if d.get("last_axis") else x[0].reshape(x[0].shape[0], -1)
    y = a @ p["WEIGHT"]  # weight [in, units]
    return y + p["BIAS"] if "BIAS" in p else y


def op_conv2d(layer, x, p, ctx):
    c = layer.get("conv2d", {})
    y = F.conv2d(x[0], p["WEIGHT"], p.get("BIAS"),
                 stride=(c.get("stride_h") or 1, c.get("stride_w") or 1),
                 padding=(c.get("pad_h", 0), c.get("pad_w", 0)),
                 dilation=(c.get("dilation_h") or 1, c.get("dilation_w") or 1),
                 groups=c.get("groups") or 1)
    return y


def op_conv_transpose2d(layer, x, p, ctx):
    # Weight [in_channels, filters / groups, kh, kw], PyTorch's layout.
    c = layer.get("conv2d", {})
    y = F.conv_transpose2d(
        x[0], p["WEIGHT"], p.get("BIAS"),
        stride=(c.get("stride_h") or 1, c.get("stride_w") or 1),
        padding=(c.get("pad_h", 0), c.get("pad_w", 0)),
        output_padding=(c.get("output_padding_h", 0),
                        c.get("output_padding_w", 0)),
        groups=c.get("groups") or 1,
        dilation=(c.get("dilation_h") or 1, c.get("dilation_w") or 1))
    return y


def _pool_geometry(layer):
    q = layer.get("pool", {})
    k = (q["kernel_h"], q["kernel_w"])
    s = (q.get("stride_h") or k[0], q.get("stride_w") or k[1])
    return k, s, (q.get("pad_h", 0), q.get("pad_w", 0))


def op_max_pool2d(layer, x, p, ctx):
    k, s, pad = _pool_geometry(layer)
    return F.max_pool2d(x[0], k, s, pad)


def op_avg_pool2d(layer, x, p, ctx):
    k, s, pad = _pool_geometry(layer)
    return F.avg_pool2d(x[0], k, s, pad, count_include_pad=True)


def op_global_avg_pool(layer, x, p, ctx):
    return x[0].mean(dim=(2, 3))


def op_flatten(layer, x, p, ctx):
    return x[0].reshape(x[0].shape[0], -1)


def op_add(layer, x, p, ctx):
    return x[0] + x[1]


def op_resize_bilinear(layer, x, p, ctx):
    r = layer["resize"]
    return F.interpolate(x[0], size=(r["out_h"], r["out_w"]), mode="bilinear",
                         align_corners=False)


def op_bias_add(layer, x, p, ctx):
    shape = [1, -1] + [1] * (x[0].dim() - 2)
    return x[0] + p["BIAS"].reshape(shape)


def op_relu(layer, x, p, ctx):
    return F.relu(x[0])


def op_sigmoid(layer, x, p, ctx):
    return torch.sigmoid(x[0])


def op_tanh(layer, x, p, ctx):
    return torch.tanh(x[0])


def op_silu(layer, x, p, ctx):
    return F.silu(x[0])


def op_gelu(layer, x, p, ctx):
    return F.gelu(x[0], approximate="none")


def op_gelu_tanh(layer, x, p, ctx):
    return F.gelu(x[0], approximate="tanh")


def op_softmax(layer, x, p, ctx):
    if layer.get("softmax", {}).get("causal", False):
        # Row i keeps columns j <= i: the masked probabilities are exactly
        # +0, and so are their gradients.
        t = x[0].shape[-1]
        masked = torch.ones(t, t, dtype=torch.bool).triu(1)
        return torch.softmax(x[0].masked_fill(masked, float("-inf")), dim=-1)
    return torch.softmax(x[0], dim=-1)


def op_matmul(layer, x, p, ctx):
    m = layer.get("matmul", {})
    a = x[0].transpose(-1, -2) if m.get("transpose_a", False) else x[0]
    b = x[1].transpose(-1, -2) if m.get("transpose_b", False) else x[1]
    y = a @ b
    scale = f32(m.get("scale") or 1.0)
    return y if scale == 1.0 else y * scale


def op_transpose(layer, x, p, ctx):
    return x[0].permute(*layer["transpose"]["perm"])


def op_reshape(layer, x, p, ctx):
    return x[0].reshape([x[0].shape[0]] + list(layer["reshape"]["shape"]))


def op_layer_norm(layer, x, p, ctx):
    return F.layer_norm(x[0], (x[0].shape[-1],), p["WEIGHT"], p["BIAS"],
                        eps=f32(1e-5))


def op_batch_norm(layer, x, p, ctx):
    b = layer.get("batch_norm", {})
    running = ctx.running[layer["name"]]  # [2, C], updated in place
    mean, var = running[0], running[1]
    y = F.batch_norm(x[0], mean, var, p["WEIGHT"], p["BIAS"],
                     training=not b.get("eval", False),
                     momentum=f32(b.get("momentum") or 0.1),
                     eps=f32(b.get("epsilon") or 1e-5))
    ctx.emit(layer["name"], "RUNNING_STAT", "running", running.clone())
    return y


def op_embedding(layer, x, p, ctx):
    return F.embedding(x[0], p["WEIGHT"])


def op_dropout(layer, x, p, ctx):
    # The keep/drop pattern is Lockstep's Philox draw (from the dump); the
    # scale is the op's definition 1 / (1 - rate) in float64.
    rate = f32(layer.get("dropout", {}).get("rate", 0.0))
    keep = ctx.dumped(layer["name"], "DROPOUT_MASK", "mask") != 0
    mask = torch.from_numpy(keep.astype(np.float64)) * (1.0 / (1.0 - rate))
    mask = mask.reshape(x[0].shape)
    ctx.emit(layer["name"], "DROPOUT_MASK", "mask", mask)
    return x[0] * mask


def op_constant(layer, x, p, ctx):
    c = layer.get("constant", {})
    values = [f32(v) for v in c.get("values", [])]
    return torch.tensor(values, dtype=DT).reshape([int(d) for d in c.get("shape", [])])


def op_parameter(layer, x, p, ctx):
    # A node of its own: its gradient is the sum over the uses.
    return p["WEIGHT"].clone()


def _axis(axis, rank):
    return axis + rank if axis < 0 else axis


def op_gather(layer, x, p, ctx):
    data = x[0]
    axis = _axis(int(layer.get("gather", {}).get("axis", 0)), data.dim())
    idx = x[1].detach().long()  # token ids, or a CONSTANT of whole numbers
    idx = torch.where(idx < 0, idx + data.shape[axis], idx)
    y = data.index_select(axis, idx.reshape(-1))
    return y.reshape(data.shape[:axis] + idx.shape + data.shape[axis + 1:])


def op_concat(layer, x, p, ctx):
    return torch.cat(x, dim=int(layer.get("concat", {}).get("axis", 0)))


def op_slice(layer, x, p, ctx):
    # ONNX Slice with a positive step clamps like Python's slices.
    s = layer["slice"]
    axis = _axis(int(s.get("axis", 0)), x[0].dim())
    pos = list(range(x[0].shape[axis]))[
        slice(int(s.get("start", 0)), int(s.get("end", 0)), int(s.get("step", 0)) or 1)]
    return x[0].index_select(axis, torch.tensor(pos, dtype=torch.long))


_BINARY = {
    "BINARY_ADD": torch.add, "BINARY_SUB": torch.sub, "BINARY_MUL": torch.mul,
    "BINARY_DIV": torch.div, "BINARY_POW": torch.pow,
    "BINARY_MAX": torch.maximum, "BINARY_MIN": torch.minimum,
}
_UNARY = {
    "UNARY_NEG": torch.neg, "UNARY_ABS": torch.abs, "UNARY_SQRT": torch.sqrt,
    "UNARY_RECIPROCAL": torch.reciprocal, "UNARY_EXP": torch.exp,
    "UNARY_LOG": torch.log, "UNARY_ERF": torch.erf,
    "UNARY_IDENTITY": lambda t: t.clone(),
}
_COMPARE = {
    "COMPARE_EQUAL": torch.eq, "COMPARE_LESS": torch.lt,
    "COMPARE_LESS_EQUAL": torch.le, "COMPARE_GREATER": torch.gt,
    "COMPARE_GREATER_EQUAL": torch.ge,
}


def op_binary(layer, x, p, ctx):
    # NumPy broadcasting, as Lockstep's (an unbatched operand lines up on
    # the right). MAX/MIN ties differ (torch splits the gradient, Lockstep
    # sends it to the first input) only on exactly equal elements.
    return _BINARY[layer["binary"]["kind"]](x[0], x[1])


def op_unary(layer, x, p, ctx):
    return _UNARY[layer["unary"]["kind"]](x[0])


def op_compare(layer, x, p, ctx):
    return _COMPARE[layer["compare"]["kind"]](x[0].detach(), x[1].detach()).to(DT)


def op_where(layer, x, p, ctx):
    return torch.where(x[0].detach() != 0, x[1], x[2])


def op_reduce(layer, x, p, ctx):
    r = layer.get("reduce", {})
    axes = [_axis(int(a), x[0].dim()) for a in r.get("axes", [])]
    if not axes:  # every axis but the batch axis
        axes = list(range(1, x[0].dim()))
    keep = bool(r.get("keepdims", False))
    if r.get("kind") == "REDUCE_MEAN":
        return x[0].mean(dim=axes, keepdim=keep)
    return x[0].sum(dim=axes, keepdim=keep)


def op_softmax_xent(layer, x, p, ctx):
    logits = x[0]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           ctx.labels.reshape(-1).long()).reshape(1)


OPS = {
    "DENSE": op_dense,
    "CONV2D": op_conv2d,
    "CONV_TRANSPOSE2D": op_conv_transpose2d,
    "MAX_POOL2D": op_max_pool2d,
    "AVG_POOL2D": op_avg_pool2d,
    "GLOBAL_AVG_POOL": op_global_avg_pool,
    "FLATTEN": op_flatten,
    "ADD": op_add,
    "RESIZE_BILINEAR": op_resize_bilinear,
    "BIAS_ADD": op_bias_add,
    "RELU": op_relu,
    "SIGMOID": op_sigmoid,
    "TANH": op_tanh,
    "SILU": op_silu,
    "GELU": op_gelu,
    "GELU_TANH": op_gelu_tanh,
    "SOFTMAX": op_softmax,
    "LAYER_NORM": op_layer_norm,
    "BATCH_NORM": op_batch_norm,
    "EMBEDDING": op_embedding,
    "DROPOUT": op_dropout,
    "SOFTMAX_XENT": op_softmax_xent,
    "MATMUL": op_matmul,
    "TRANSPOSE": op_transpose,
    "RESHAPE": op_reshape,
    "CONSTANT": op_constant,
    "PARAMETER": op_parameter,
    "GATHER": op_gather,
    "CONCAT": op_concat,
    "SLICE": op_slice,
    "BINARY": op_binary,
    "UNARY": op_unary,
    "COMPARE": op_compare,
    "WHERE": op_where,
    "REDUCE": op_reduce,
}

MODEL_INPUT = "<input>"  # Layer.inputs' name for the model input


def input_names(layers, i):
    """Producers of layers[i]: layer names, None for the model input."""
    if layers[i]["op"] in ("CONSTANT", "PARAMETER"):
        return []  # no inputs, wherever they stand
    names = layers[i].get("inputs") or ([layers[i - 1]["name"]] if i else [None])
    return [None if n == MODEL_INPUT else n for n in names]

# --------------------------------------------------------------------------
# Bounds, per tensor role, on the relative L2 error ||lockstep - ref|| /
# ||ref|| after a few (3) training steps; docs/parity.md ("Bounds") has the
# full derivation. In short, with U the float32 unit roundoff:
#  - one op's own rounding: 0 for copies (relu, flatten, max pool, embedding
#    lookup), <= U for one-rounding elementwise ops, <= 16 U for the
#    portable-math activations, and for a canonical reduction of n terms
#    <= (256 + log2(n / 256)) U times sum |terms| in the worst case, ~16 U
#    typically (independent roundings: sqrt(chain length) U);
#  - the float64 trajectory is independent, so a tensor carries the error of
#    everything upstream: along the zoo's longest forward + backward path
#    (~60 ops, resnet_bn) of well-conditioned ops that adds up to ~60 * 16 U
#    ~= 5.7e-5 per step; over 3 steps the parameters inherit a gradient's
#    error only scaled by lr |g| / |w| << 1. 1e-4 (~1700 U) covers that
#    with margin for every computed role.
#  - DROPOUT_MASK: the keep pattern is the dump's, the scale 1 / (1 - rate)
#    is two float32 roundings: 2 U, 3 U with the reference's own rounding.
#  - UPDATE (w_t - w_{t-1} from Lockstep's own float32 parameters): each
#    parameter is rounded after its update, up to U |w| per element however
#    small the update; compare() adds 2 U ||w_t|| / ||update||.
# --------------------------------------------------------------------------

U = 2.0 ** -24  # float32 unit roundoff
TRAJECTORY_BOUND = 1e-4
# A parameter gradient is "cancelled" (exactly 0 in exact arithmetic) when
# the float64 reference's norm is below CANCELLED_RATIO of Lockstep's: real
# gradients agree to ~1e-6, cancelled ones differ by ~1e-9 (the two
# precisions' rounding noise). Lockstep's noise must then stay below
# CANCELLED_BOUND of the step's largest weight gradient.
CANCELLED_RATIO = 1e-4
CANCELLED_BOUND = 1e-4
# A gradient that nearly cancels (the float64 reference's norm below
# NEAR_CANCELLED_RATIO of the step's largest weight gradient) is a sum
# whose terms are far larger than its value: a batch norm's scale feeding a
# depthwise convolution and another batch norm, which undoes any rescaling
# of a channel but for its epsilon (mobilenet_v2's expansion layers). Its
# float32 relative error is cond * u, far above TRAJECTORY_BOUND, while its
# absolute error is rounding noise: it is held, like a cancelled one, to
# CANCELLED_BOUND of the largest weight gradient in absolute terms, and its
# trajectory is left out from then on.
NEAR_CANCELLED_RATIO = 1e-3

BOUNDS = {
    "ACTIVATION": TRAJECTORY_BOUND,
    "LOSS": TRAJECTORY_BOUND,
    "DROPOUT_MASK": 3 * U,
    "RUNNING_STAT": TRAJECTORY_BOUND,
    "GRAD_ACTIVATION": TRAJECTORY_BOUND,
    "GRAD_WEIGHT": TRAJECTORY_BOUND,
    "GRAD_BIAS": TRAJECTORY_BOUND,
    "GRAD_NORM": TRAJECTORY_BOUND,
    "WEIGHT": TRAJECTORY_BOUND,
    "BIAS": TRAJECTORY_BOUND,
    "OPTIMIZER_STATE": TRAJECTORY_BOUND,
    "UPDATE": TRAJECTORY_BOUND,
}

# Bounds on rel_max, the largest elementwise error over the reference's RMS
# magnitude (relative L2 alone dilutes one wrong element by sqrt(numel)).
# 10x the L2 bound: an element near zero that sums large terms carries an
# absolute error of the size of its terms, so the worst element is several
# times the RMS error. Updates: Adam's lr * g / (|g| + eps) has a gain up to
# lr / eps on the absolute error of a gradient element near 0, so one
# element of an lr-sized update can be ~1e-3 of the update's RMS off.
ELEMENT_BOUND = 10 * TRAJECTORY_BOUND
ELEMENT_BOUNDS = {"DROPOUT_MASK": 3 * U, "UPDATE": 1e-2}


# --------------------------------------------------------------------------
# The dump
# --------------------------------------------------------------------------

class Entry:
    def __init__(self, json_path):
        with open(json_path) as f:
            meta = json.load(f)
        e = meta["entry"]
        self.step = meta["step"]
        self.index = e["index"]
        self.layer = e["layer"]
        self.role = e["role"]
        self.slot = e.get("slot", "")
        self.op = e["op"]
        self.shape = [int(s) for s in e["shape"]]
        self.path = json_path[:-len(".json")] + ".npy"
        self._value = None

    @property
    def key(self):
        return (self.layer, self.role, self.slot)

    def value(self):
        if self._value is None:
            self._value = np.load(self.path)
        return self._value


def load_dump(directory, run=0):
    """{step: [Entry in manifest order]}."""
    steps = {}
    for path in glob.glob(os.path.join(directory, "run%d_step*.json" % run)):
        e = Entry(path)
        steps.setdefault(e.step, []).append(e)
    for s in steps.values():
        s.sort(key=lambda e: e.index)
    return steps


def initial_parameters(init_dump):
    """(layer, role) -> float64 tensor, from a dump of one step whose update
    left every parameter as initialised (parity.py: SGD at the smallest
    positive learning rate, so u = lr * g is 0 or the smallest subnormal
    and w - u == w for every normal w). Parameters initialised to exactly
    zero may come back as +-2^-149; they are restored to 0."""
    params = {}
    for e in init_dump[0]:
        if e.role in ("WEIGHT", "BIAS"):
            v = e.value().astype(np.float64)
            v[np.abs(v) < 2.0 ** -126] = 0.0
            params[(e.layer, e.role)] = torch.from_numpy(v)
    return params


# --------------------------------------------------------------------------
# The float64 run
# --------------------------------------------------------------------------


class StepContext:
    def __init__(self, entries, running):
        self.by_key = {e.key: e for e in entries}
        self.running = running
        self.emitted = {}
        self.labels = None

    def dumped(self, layer, role, slot=""):
        e = self.by_key.get((layer, role, slot))
        if e is None:
            raise KeyError("the dump has no %s %s %s tensor" % (layer, role, slot))
        return e.value()

    def emit(self, layer, role, slot, tensor):
        self.emitted[(layer, role, slot)] = tensor.detach().clone()


def make_optimizer(config, params):
    o = config.get("optimizer", {})
    kind = o.get("kind", "SGD")
    lr = f32(o["learning_rate"])
    if kind in ("SGD", "OPTIMIZER_KIND_UNSPECIFIED"):
        return torch.optim.SGD(params, lr=lr, foreach=False), []
    if kind == "MOMENTUM":
        return (torch.optim.SGD(params, lr=lr, momentum=f32(o.get("momentum", 0.0)),
                                foreach=False), ["velocity"])
    betas = (f32(o.get("beta1") or 0.9), f32(o.get("beta2") or 0.999))
    eps = f32(o.get("epsilon") or 1e-7)
    if kind == "ADAM":
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps,
                                foreach=False), ["m", "v"]
    if kind == "ADAMW":
        return (torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps,
                                  weight_decay=f32(o.get("weight_decay") or 0.01),
                                  foreach=False), ["m", "v"])
    raise ValueError("unsupported optimizer %s" % kind)


STATE_NAMES = {"velocity": "momentum_buffer", "m": "exp_avg", "v": "exp_avg_sq"}


def initial_running(weight):
    """BATCH_NORM's running statistics [2, C] before the first step: mean 0,
    variance 1 (model.proto)."""
    c = weight.shape[0]
    return torch.stack([torch.zeros(c), torch.ones(c)])


def check_ops(model):
    for layer in model["layers"]:
        if layer["op"] not in OPS:
            raise NotImplementedError(
                "unsupported op %s (layer \"%s\"): add it to OPS in %s" %
                (layer["op"], layer["name"], os.path.basename(__file__)))


def reference_run(model, config, dump, init_params):
    """Yields (step, {(layer, role, slot): float64 tensor}) for every dumped
    step, computed by the float64 PyTorch trajectory."""
    check_ops(model)
    torch.set_default_dtype(DT)
    layers = model["layers"]
    params = {}  # (layer, role) -> leaf tensor
    for l in layers:
        for role in ("WEIGHT", "BIAS"):
            if (l["name"], role) in init_params:
                params[(l["name"], role)] = (
                    init_params[(l["name"], role)].clone().requires_grad_(True))
    running = {l["name"]: initial_running(params[(l["name"], "WEIGHT")])
               for l in layers if l["op"] == "BATCH_NORM"}
    order = list(params.keys())
    opt, slots = make_optimizer(config, [params[k] for k in order])
    clip = f32(config.get("optimizer", {}).get("clip_grad_norm", 0.0))

    for step in sorted(dump):
        ctx = StepContext(dump[step], running)
        x_np = ctx.dumped("", "INPUT")
        x = torch.from_numpy(x_np.astype(np.int64 if x_np.dtype.kind == "i"
                                         else np.float64))
        ctx.labels = torch.from_numpy(ctx.dumped("", "LABEL").astype(np.int64))
        outs = {}
        input_clones = {}
        for i, l in enumerate(layers):
            names = input_names(layers, i)
            ins = []
            for k, src in enumerate(names):
                t = x if src is None else outs[src]
                if t.requires_grad:
                    # One node per consumer: its gradient is this consumer's
                    # contribution alone (Lockstep's GRAD_ACTIVATION inputK).
                    t = t.clone()
                    t.retain_grad()
                    input_clones[(l["name"], k)] = t
                ins.append(t)
            p = {role: params[(n, role)] for (n, role) in params if n == l["name"]}
            y = OPS[l["op"]](l, ins, p, ctx)
            if y.requires_grad:
                y.retain_grad()
            outs[l["name"]] = y
            role = "LOSS" if l["op"] == "SOFTMAX_XENT" else "ACTIVATION"
            ctx.emit(l["name"], role, "", y)
        loss = outs[layers[-1]["name"]]
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        for l in layers:
            y = outs[l["name"]]
            if y.grad is not None:
                ctx.emit(l["name"], "GRAD_ACTIVATION", "sum", y.grad)
        for (name, k), t in input_clones.items():
            if t.grad is not None:
                ctx.emit(name, "GRAD_ACTIVATION", "input%d" % k, t.grad)
        for (name, role), t in params.items():
            ctx.emit(name, "GRAD_" + role, "", t.grad)
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_([params[k] for k in order], clip)
            ctx.emit("", "GRAD_NORM", "", norm.reshape(1))
        before = {k: t.detach().clone() for k, t in params.items()}
        opt.step()
        for (name, role), t in params.items():
            ctx.emit(name, role, "", t)
            ctx.emit(name, role, "update", t.detach() - before[(name, role)])
            st = opt.state[t]
            for s in slots:
                # Keyed by the parameter too: the manifest lists a
                # parameter's state right after it, with the same slot names
                # for weight and bias.
                ctx.emit(name, "OPTIMIZER_STATE", role + ":" + s,
                         st[STATE_NAMES[s]])
        yield step, ctx.emitted


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------


def rel_max(got, ref):
    """The largest elementwise error relative to the reference's RMS
    magnitude: catches a wrong element that relative L2 dilutes by
    sqrt(numel)."""
    if got.size == 0:
        return 0.0
    d = np.max(np.abs(got - ref))
    rms = np.linalg.norm(ref.ravel()) / math.sqrt(ref.size)
    if rms == 0.0:
        return 0.0 if d == 0.0 else math.inf
    return d / rms


def rel_l2(got, ref):
    d = np.linalg.norm((got - ref).ravel())
    n = np.linalg.norm(ref.ravel())
    if n == 0.0:
        return 0.0 if d == 0.0 else math.inf
    return d / n


def compare(model, config, dump, init_params):
    """Returns (results, problems): results a list of dicts (step, layer,
    role, slot, op, rel, bound, relmax, element_bound, ref_norm), problems
    a list of strings (any tensor out of bounds, or dumped without a
    reference counterpart)."""
    results, problems = [], []
    prev = {k: v.numpy() for k, v in init_params.items()}
    # Parameters the loss does not depend on (an attention key's bias: a
    # softmax row's input gradient sums to zero, so the bias gradient is
    # exactly 0). Both runs then hold rounding noise, 1e-16 vs 1e-7 of its
    # terms, and Adam scales that noise into steps of their own: such a
    # parameter's trajectory is not comparable. Its gradient must stay
    # noise (CANCELLED_BOUND of the step's largest weight gradient); the
    # parameter, its update and optimizer state are left out from then on
    # (the one-op-at-a-time check still checks their arithmetic).
    cancelled = set()
    # Adam and AdamW divide each element's step by that element's own
    # gradient magnitude, so the absolute gradient error the gradient bound
    # allows (delta = TRAJECTORY_BOUND * rms(g)) moves an element whose
    # gradient is near 0 by up to 2 lr (1 - beta1) / (1 - beta1^t) delta /
    # (sqrt(v_hat) + eps), at most 2 lr: that much is added to the update's
    # bound, and accumulated into the parameter's (docs/parity.md).
    o = config.get("optimizer", {})
    adam = o.get("kind") in ("ADAM", "ADAMW")
    lr = f32(o.get("learning_rate", 0.0))
    b1 = f32(o.get("beta1") or 0.9)
    b2 = f32(o.get("beta2") or 0.999)
    eps = f32(o.get("epsilon") or 1e-7)
    adam_drift = {}  # (layer, role) -> accumulated norm of that allowance
    adam_rms = {}  # (layer, role) -> accumulated RMS of the reference updates

    def adam_allowances(ref, step, layer, role):
        """Per element: how far the update may move for the gradient error
        the gradient bound allows (None without Adam)."""
        g = ref.get((layer, "GRAD_" + role, ""))
        v = ref.get((layer, "OPTIMIZER_STATE", role + ":v"))
        if not adam or g is None or v is None:
            return None
        g = g.detach().numpy().astype(np.float64).ravel()
        v_hat = v.detach().numpy().astype(np.float64).ravel() / (1 - b2 ** (step + 1))
        delta = TRAJECTORY_BOUND * math.sqrt(float(np.mean(g * g))) if g.size else 0.0
        gain = 2 * lr * (1 - b1) / (1 - b1 ** (step + 1))
        return np.minimum(2 * lr, gain * delta / (np.sqrt(v_hat) + eps))

    def adam_allowance(ref, step, layer, role):
        a = adam_allowances(ref, step, layer, role)
        return 0.0 if a is None else float(np.linalg.norm(a))

    for step, ref in reference_run(model, config, dump, init_params):
        grad_norms = {}
        for e in dump[step]:
            if e.role in ("GRAD_WEIGHT", "GRAD_BIAS"):
                r = ref.get(e.key)
                if r is not None:
                    mine = e.value().astype(np.float64).ravel()
                    theirs = r.detach().numpy().astype(np.float64).ravel()
                    grad_norms[(e.layer, e.role[len("GRAD_"):])] = (
                        float(np.linalg.norm(mine)),
                        float(np.linalg.norm(theirs)),
                        float(np.linalg.norm(mine - theirs))
                        if mine.size == theirs.size else float("inf"))
        largest = max([g for g, _, _ in grad_norms.values()] + [0.0])
        for pk, (g, w, d) in grad_norms.items():
            if g > 0 and (w < CANCELLED_RATIO * g or
                          w < NEAR_CANCELLED_RATIO * largest):
                if not d <= CANCELLED_BOUND * largest:
                    problems.append(
                        "step %d layer \"%s\" GRAD_%s: the reference gradient "
                        "(nearly) cancels to %.3g, Lockstep's is %.3g, they "
                        "differ by %.3g, above %.0e of the largest weight "
                        "gradient %.3g" %
                        (step, pk[0], pk[1], w, g, d, CANCELLED_BOUND, largest))
                if pk not in cancelled:
                    cancelled.add(pk)
                # Reported as role CANCELLED: its "rel" is Lockstep's noise
                # over the largest weight gradient.
                results.append(dict(step=step, layer=pk[0], role="CANCELLED",
                                    slot=pk[1].lower(), op="cancelled gradient",
                                    rel=d / max(largest, 1e-300), bound=CANCELLED_BOUND,
                                    relmax=d / max(largest, 1e-300),
                                    element_bound=CANCELLED_BOUND, ref_norm=w))
        param_role = None
        for e in dump[step]:
            if e.role in ("INPUT", "LABEL"):
                continue  # the reference reads these from the dump
            key = e.key
            if e.role in ("WEIGHT", "BIAS"):
                param_role = e.role
            elif e.role == "OPTIMIZER_STATE":
                key = (e.layer, e.role, "%s:%s" % (param_role, e.slot))
            r = ref.get(key)
            if r is None:
                problems.append("step %d %s %s %s (%s): no reference tensor" %
                                (step, e.layer, e.role, e.slot, e.op))
                continue
            pk = (e.layer, param_role if e.role == "OPTIMIZER_STATE" else
                  e.role[len("GRAD_"):] if e.role.startswith("GRAD_") else e.role)
            if pk in cancelled and e.role in ("WEIGHT", "BIAS", "OPTIMIZER_STATE",
                                              "GRAD_WEIGHT", "GRAD_BIAS"):
                if e.role in ("WEIGHT", "BIAS"):
                    prev[(e.layer, e.role)] = e.value()
                continue
            got = e.value().astype(np.float64).ravel()
            want = r.detach().numpy().astype(np.float64).ravel()
            if got.size != want.size:
                problems.append("step %d %s %s %s: %d elements, reference %d" %
                                (step, e.layer, e.role, e.slot, got.size, want.size))
                continue
            rows = [(e.role, e.slot, got, want)]
            allowance = {}
            element_allowance = None  # UPDATE: per element, Adam's
            if e.role in ("WEIGHT", "BIAS"):
                a = adam_allowance(ref, step, e.layer, e.role)
                element_allowance = adam_allowances(ref, step, e.layer, e.role)
                adam_drift[(e.layer, e.role)] = adam_drift.get((e.layer, e.role), 0.0) + a
                allowance = {"UPDATE": a, e.role: adam_drift[(e.layer, e.role)]}
                # The same per element: an update element may be off by the
                # update's element bound (of its RMS), and the parameter
                # carries every update so far.
                upd_ref = ref[(e.layer, e.role, "update")].numpy().ravel()
                if adam and upd_ref.size:
                    adam_rms[(e.layer, e.role)] = adam_rms.get((e.layer, e.role), 0.0) + \
                        math.sqrt(float(np.mean(upd_ref * upd_ref)))
                # The update itself, w_t - w_{t-1}, from Lockstep's own
                # consecutive float32 parameters (exact in float64).
                pk = (e.layer, e.role)
                upd = got - prev[pk].astype(np.float64).ravel()
                rows.append(("UPDATE", e.role.lower(), upd,
                             ref[(e.layer, e.role, "update")].numpy().ravel()))
                prev[pk] = e.value()
            for role, slot, g, w in rows:
                rel = rel_l2(g, w)
                bound = BOUNDS[role]
                if role == "UPDATE":
                    # The float32 parameter is rounded to half an ulp after
                    # each update: that alone is up to U * ||w|| in the
                    # difference of two rounded parameters (docs/parity.md).
                    bound += 2 * U * np.linalg.norm(got) / max(np.linalg.norm(w), 1e-300)
                bound += allowance.get(role, 0.0) / max(np.linalg.norm(w), 1e-300)
                relmax = rel_max(g, w)
                res = dict(step=step, layer=e.layer, role=role, slot=slot,
                           op=e.op, rel=rel, bound=bound, relmax=relmax,
                           ref_norm=float(np.linalg.norm(w)))
                results.append(res)
                ebound = ELEMENT_BOUNDS.get(role, ELEMENT_BOUND)
                if role in ("WEIGHT", "BIAS") and (e.layer, role) in adam_rms and w.size:
                    w_rms = math.sqrt(float(np.mean(w * w)))
                    ebound = max(ebound, ELEMENT_BOUNDS["UPDATE"] *
                                 adam_rms[(e.layer, role)] / max(w_rms, 1e-300))
                res["element_bound"] = ebound
                what = "step %d layer \"%s\" %s%s (%s)" % (
                    step, e.layer, role, " " + slot if slot else "", e.op)
                if not rel <= bound:
                    problems.append(
                        "%s: relative L2 %.3g > bound %.3g (|ref| %.6g, |lockstep| "
                        "%.6g, max abs diff %.3g)" %
                        (what, rel, bound, np.linalg.norm(w), np.linalg.norm(g),
                         np.max(np.abs(g - w)) if g.size else 0.0))
                elif not relmax <= ebound and not (
                        role == "UPDATE" and element_allowance is not None and
                        np.all(np.abs(g - w) <= ebound * math.sqrt(float(np.mean(w * w))) +
                               element_allowance)):
                    # (An update element whose own gradient is near 0 may
                    # be off by its own Adam allowance, the per-element
                    # terms of the update's L2 allowance above.)
                    i = int(np.argmax(np.abs(g - w)))
                    problems.append(
                        "%s: element %d is %.9g, reference %.9g: error %.3g of the "
                        "RMS magnitude > element bound %.3g" %
                        (what, i, g[i], w[i], relmax, ebound))
    return results, problems
