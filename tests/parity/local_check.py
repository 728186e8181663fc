"""One op at a time: each Lockstep float32 op against its float64 definition
on the same (Lockstep's own) inputs, with a per-op error bound from the
spec's float32 arithmetic.

Where torch_reference.compare() follows an independent float64 trajectory
(errors accumulate, so its bounds are loose), this check feeds every op
Lockstep's own float32 inputs from the dump -- the layer's inputs, the
parameters of the previous step, the upstream gradient, the previous
optimizer state -- so the only difference left is the op's own rounding,
which the spec bounds element by element:

  |lockstep - reference| <= k * U * cond      (every element)

with cond and k per error family (docs/parity.md, "One op at a time"):

  linear     sums and dot products (dense, conv2d, conv_transpose2d, matmul,
             pooling, resize, bias, add, flatten, embedding, dropout): cond
             = the op applied to the
             absolute values of its inputs (forward) or the vector-Jacobian
             product of |inputs| with |dy| (backward), i.e. sum |terms|;
             k = 256 (a chain) + 32 (the pairwise tree of up to 2^32
             chains) + 2 (bias add or division) = 290.
  select     copies chosen by comparisons or moved (relu, max pooling,
             transpose, reshape): forward exact (k = 0); backward sums of
             the selected dy: cond from |dy|, k = 290 (transpose and reshape
             move dy back unchanged, well within it).
  pointwise  portable-math activations: forward 16 U max(|y|, 1) (spec
             3.8); backward dy * f'(x): cond = |dy| max(|f'(x)|, 1), k = 17.
  compound   softmax, layer norm, batch norm, softmax cross-entropy: rows
             normalised by their own reductions; no elementwise bound is
             claimed, relative L2 <= COMPOUND_BOUND (1e-5, ~170 U: a few
             reductions of <= 256-term chains at ~sqrt(256) U each plus the
             elementwise roundings).
  optimizer  SGD / momentum / Adam / AdamW, clipping included: weights
             cond = |w_prev| + the update with every term in absolute value
             (lr (beta1 |m_prev| + (1 - beta1) |g|) / (1 - beta1^t) /
             (sqrt(v_hat) + eps) + lr decay |w_prev| for Adam(W): a first
             moment that nearly cancels passes its terms' rounding on), state
             cond = the magnitudes of the two terms it sums; k = 16 (<= 14 roundings on the longest path:
             clip 3, decay 2, Adam 8, final subtraction 1).
"""

import math

import numpy as np
import torch

import torch_reference as ref

U = ref.U
K_SUM = 256 + 32 + 2
COMPOUND_BOUND = 1e-5
K_OPT = 16
TINY = 2.0 ** -140  # absolute slack: subnormal results round by 2^-150

FAMILY = {
    "DENSE": "linear", "CONV2D": "linear", "CONV_TRANSPOSE2D": "linear",
    "AVG_POOL2D": "linear",
    "GLOBAL_AVG_POOL": "linear", "FLATTEN": "linear", "ADD": "linear",
    "RESIZE_BILINEAR": "linear", "BIAS_ADD": "linear", "EMBEDDING": "linear",
    "DROPOUT": "linear", "MATMUL": "linear",
    "REDUCE": "linear", "WHERE": "select", "COMPARE": "select",
    # Quotients, powers and math functions: no elementwise bound claimed.
    "BINARY": "compound", "UNARY": "compound",
    "CONSTANT": "select", "PARAMETER": "select", "GATHER": "select",
    "CONCAT": "select", "SLICE": "select",
    "RELU": "select", "MAX_POOL2D": "select",
    "TRANSPOSE": "select", "RESHAPE": "select",
    "SIGMOID": "pointwise", "TANH": "pointwise", "SILU": "pointwise",
    "GELU": "pointwise", "GELU_TANH": "pointwise",
    "SOFTMAX": "compound", "LAYER_NORM": "compound", "BATCH_NORM": "compound",
    "SOFTMAX_XENT": "compound",
}


def check_families(model):
    for layer in model["layers"]:
        if layer["op"] not in FAMILY:
            raise NotImplementedError(
                "unsupported op %s (layer \"%s\"): give it an error family in "
                "FAMILY in local_check.py" % (layer["op"], layer["name"]))


class Checker:
    def __init__(self):
        self.results = []
        self.problems = []

    def elementwise(self, what, op, got, want, k, cond):
        got = np.asarray(got, np.float64).ravel()
        want = np.asarray(want, np.float64).ravel()
        cond = np.asarray(cond, np.float64).ravel()
        if got.size != want.size:
            self.problems.append("%s: %d elements, reference %d" % (what, got.size, want.size))
            return
        err = np.abs(got - want)
        limit = k * U * cond + TINY
        # err in units of U * cond: the measured k
        ratio = err / (U * cond + TINY) if err.size else np.zeros(0)
        worst = float(ratio.max()) if ratio.size else 0.0
        self.results.append(dict(what=what, op=op, measure="k", value=worst, bound=k))
        bad = np.nonzero(err > limit)[0]
        if bad.size:
            i = int(bad[np.argmax(ratio[bad])])
            self.problems.append(
                "%s (%s): element %d is %.9g, reference %.9g: error %.3g = %.1f U * cond "
                "(cond %.3g) > %d U * cond; %d element(s) out of bounds" %
                (what, op, i, got[i], want[i], err[i], ratio[i], cond[i], k, bad.size))

    def relative(self, what, op, got, want, bound):
        got = np.asarray(got, np.float64).ravel()
        want = np.asarray(want, np.float64).ravel()
        if got.size != want.size:
            self.problems.append("%s: %d elements, reference %d" % (what, got.size, want.size))
            return
        rel = ref.rel_l2(got, want)
        self.results.append(dict(what=what, op=op, measure="rel", value=rel, bound=bound))
        if not rel <= bound:
            self.problems.append("%s (%s): relative L2 %.3g > %.3g" % (what, op, rel, bound))


def _t(a):
    return torch.from_numpy(np.asarray(a).astype(np.float64))


def _grads(y, targets, dy):
    live = [t for t in targets if t is not None and t.requires_grad]
    got = torch.autograd.grad(y, live, grad_outputs=dy, allow_unused=True,
                              retain_graph=True)
    out, it = [], iter(got)
    for t in targets:
        out.append(next(it) if t is not None and t.requires_grad else None)
    return out


def local_check(model, config, dump, init_params):
    """Returns (results, problems) over every step of `dump`."""
    ref.check_ops(model)
    check_families(model)
    torch.set_default_dtype(ref.DT)
    layers = model["layers"]
    names_of = {}
    consumers = {}
    for i, l in enumerate(layers):
        names = ref.input_names(layers, i)
        names_of[l["name"]] = names
        for k, src in enumerate(names):
            consumers.setdefault(src, []).append((l["name"], k))
    o = config.get("optimizer", {})
    kind = o.get("kind", "SGD")
    clip = ref.f32(o.get("clip_grad_norm", 0.0))
    prev_w = {key: t.clone() for key, t in init_params.items()}
    prev_state = {}
    prev_running = {l["name"]: None for l in layers if l["op"] == "BATCH_NORM"}
    chk = Checker()

    for step in sorted(dump):
        ctx = ref.StepContext(dump[step], {})
        has = set(ctx.by_key)

        def d(layer, role, slot=""):
            return _t(ctx.dumped(layer, role, slot))

        x_np = ctx.dumped("", "INPUT")
        batch = torch.from_numpy(x_np.astype(np.int64)) if x_np.dtype.kind == "i" else _t(x_np)
        ctx.labels = torch.from_numpy(ctx.dumped("", "LABEL").astype(np.int64))
        tag = "step %d layer \"%s\" %s"
        for l in layers:
            name, op, fam = l["name"], l["op"], FAMILY[l["op"]]
            out_role = "LOSS" if op == "SOFTMAX_XENT" else "ACTIVATION"
            ins = []
            for src in names_of[name]:
                t = batch if src is None else d(src, "ACTIVATION")
                ins.append(t.clone().requires_grad_(t.is_floating_point()))
            p = {role: prev_w[(n, role)].clone().requires_grad_(True)
                 for (n, role) in prev_w if n == name}
            if op == "BATCH_NORM":
                r = prev_running[name]
                ctx.running[name] = (r.clone() if r is not None else
                                     ref.initial_running(p["WEIGHT"]))
            y = ref.OPS[op](l, ins, p, ctx)
            got = ctx.dumped(name, out_role)
            if not y.requires_grad:  # a CONSTANT: exact values, no gradient
                chk.elementwise(tag % (step, name, out_role), op, got,
                                y.detach().numpy(), 0, y.detach().abs().numpy())
                continue
            roles = list(p)
            targets = ins + [p[r] for r in roles]
            # Lockstep's gradient of this layer's output.
            if op == "SOFTMAX_XENT":
                dy = torch.ones_like(y)
            elif (name, "GRAD_ACTIVATION", "sum") in has:
                dy = d(name, "GRAD_ACTIVATION", "sum").reshape(y.shape)
            else:
                c, k = consumers[name][0]
                dy = d(c, "GRAD_ACTIVATION", "input%d" % k).reshape(y.shape)
            grads = _grads(y, targets, dy)

            if fam == "linear":
                absin = [t.detach().abs().requires_grad_(t.requires_grad)
                         if t.is_floating_point() else t for t in ins]
                absp = {r: p[r].detach().abs().requires_grad_(True) for r in roles}
                ya = ref.OPS[op](l, absin, absp, ctx)
                fwd_k, fwd_cond = K_SUM, ya.detach()
                bwd_k = K_SUM
                bwd_cond = _grads(ya, absin + [absp[r] for r in roles], dy.abs())
            elif fam == "select":
                fwd_k, fwd_cond = 0, y.detach().abs()  # a copy: exact
                bwd_k, bwd_cond = K_SUM, _grads(y, targets, dy.abs())
            elif fam == "pointwise":
                fwd_k, fwd_cond = 16, y.detach().abs().clamp(min=1.0)
                fprime = _grads(y, targets, torch.ones_like(y))[0]
                bwd_k, bwd_cond = 17, [dy.abs() * fprime.abs().clamp(min=1.0)]
            else:
                fwd_k = None
            what = tag % (step, name, out_role)
            if fwd_k is None:
                chk.relative(what, op, got, y.detach().numpy(), COMPOUND_BOUND)
            else:
                chk.elementwise(what, op, got, y.detach().numpy(), fwd_k, fwd_cond.numpy())
            if op == "BATCH_NORM":
                chk.relative(tag % (step, name, "RUNNING_STAT"), op,
                             ctx.dumped(name, "RUNNING_STAT", "running"),
                             ctx.running[name].numpy(), COMPOUND_BOUND)
                prev_running[name] = d(name, "RUNNING_STAT", "running")
            keys = [("GRAD_ACTIVATION", "input%d" % k) for k in range(len(ins))]
            keys += [("GRAD_" + r, "") for r in roles]
            for j, (role, slot) in enumerate(keys):
                if (name, role, slot) not in has:
                    continue
                g = grads[j]
                if g is None:
                    chk.problems.append("step %d layer \"%s\" %s %s: no reference gradient" %
                                        (step, name, role, slot))
                    continue
                what = tag % (step, name, role + (" " + slot if slot else ""))
                got = ctx.dumped(name, role, slot)
                bn_params = (op == "BATCH_NORM" and role in ("GRAD_WEIGHT", "GRAD_BIAS")
                             and not l.get("batch_norm", {}).get("eval", False))
                if bn_params:
                    # A batch norm's scale and shift gradients are plain sums
                    # over the batch and spatial positions -- sum(dy * xhat)
                    # and sum(dy) -- held like every sum to k U sum|terms|:
                    # they may nearly cancel (a batch norm feeding, through a
                    # per-channel op, another batch norm that undoes its
                    # scale and shift), which a relative bound cannot allow.
                    x = ins[0].detach()
                    axes = [0] + list(range(2, x.dim()))
                    terms = dy.abs()
                    if role == "GRAD_WEIGHT":
                        bn_eps = float(l.get("batch_norm", {}).get("epsilon") or 1e-5)
                        mean = x.mean(axes, keepdim=True)
                        var = ((x - mean) ** 2).mean(axes, keepdim=True)
                        terms = terms * ((x - mean) / torch.sqrt(var + bn_eps)).abs()
                    chk.elementwise(what, op + " grad", got, g.numpy(), K_SUM,
                                    terms.sum(axes).numpy())
                elif fwd_k is None:
                    chk.relative(what, op + " grad", got, g.numpy(), COMPOUND_BOUND)
                else:
                    chk.elementwise(what, op + " grad", got, g.numpy(), bwd_k,
                                    bwd_cond[j].numpy())
        # Fan-out: the output gradient is the sum of the consumers' parts.
        for src, cs in consumers.items():
            if src is None or (src, "GRAD_ACTIVATION", "sum") not in has:
                continue
            parts = [ctx.dumped(c, "GRAD_ACTIVATION", "input%d" % k).astype(np.float64).ravel()
                     for c, k in cs]
            chk.elementwise(tag % (step, src, "GRAD_ACTIVATION sum"), "grad_accumulate",
                            ctx.dumped(src, "GRAD_ACTIVATION", "sum"), sum(parts), K_SUM,
                            sum(np.abs(q) for q in parts))
        # Clipping and the update, from Lockstep's own gradients and state.
        keys = list(prev_w)
        gr = {key: _t(ctx.dumped(key[0], "GRAD_" + key[1])) for key in keys}
        if clip > 0:
            norm = math.sqrt(sum(float((g * g).sum()) for g in gr.values()))
            got_norm = float(ctx.dumped("", "GRAD_NORM")[0])
            chk.elementwise("step %d GRAD_NORM" % step, "clip_grad_norm", [got_norm],
                            [norm], K_SUM, [norm])
            coef = clip / (got_norm + 1e-6)
            if coef < 1:
                gr = {key: g * coef for key, g in gr.items()}
        leaves = {key: prev_w[key].clone().requires_grad_(True) for key in keys}
        opt, slots = ref.make_optimizer(config, [leaves[key] for key in keys])
        for key in keys:
            leaves[key].grad = gr[key].reshape(leaves[key].shape)
            st = {s: prev_state.get(key + (s,)) for s in slots}
            if kind in ("ADAM", "ADAMW"):
                z = torch.zeros_like(leaves[key])
                opt.state[leaves[key]] = {
                    "step": torch.tensor(float(step)),
                    "exp_avg": st["m"] if st["m"] is not None else z.clone(),
                    "exp_avg_sq": st["v"] if st["v"] is not None else z.clone()}
            elif kind == "MOMENTUM" and st["velocity"] is not None:
                opt.state[leaves[key]] = {"momentum_buffer": st["velocity"].clone()}
        opt.step()
        b1 = ref.f32(o.get("beta1") or 0.9)
        b2 = ref.f32(o.get("beta2") or 0.999)
        mu = ref.f32(o.get("momentum", 0.0))
        # The manifest lists each parameter, then its state.
        state_of = {}
        last = None
        for e in dump[step]:
            if e.role in ("WEIGHT", "BIAS"):
                last = (e.layer, e.role)
            elif e.role == "OPTIMIZER_STATE":
                state_of[last + (e.slot,)] = e
        lr = ref.f32(o["learning_rate"])
        eps = ref.f32(o.get("epsilon") or 1e-7)
        decay = ref.f32(o.get("weight_decay") or 0.01) if kind == "ADAMW" else 0.0
        for key in keys:
            w = leaves[key].detach()
            got = ctx.dumped(key[0], key[1])
            g = gr[key].reshape(w.shape)
            # The update's terms in absolute value: a first moment (or
            # velocity) that nearly cancels -- beta1 m + (1 - beta1) g with
            # opposite signs -- carries the rounding of its terms, not of
            # its small result, into lr m / (sqrt(v) + eps).
            old = {sl: prev_state.get(key + (sl,)) for sl in slots}
            old = {sl: torch.zeros_like(w) if t is None else t for sl, t in old.items()}
            if kind in ("ADAM", "ADAMW"):
                t = step + 1
                m_abs = (b1 * old["m"].abs() + (1 - b1) * g.abs()) / (1 - b1 ** t)
                v_hat = opt.state[leaves[key]]["exp_avg_sq"] / (1 - b2 ** t)
                upd_abs = lr * m_abs / (v_hat.sqrt() + eps) + lr * decay * prev_w[key].abs()
            elif kind == "MOMENTUM":
                upd_abs = lr * (mu * old["velocity"].abs() + g.abs())
            else:
                upd_abs = lr * g.abs()
            what = "step %d layer \"%s\" %s" % (step, key[0], key[1])
            chk.elementwise(what, kind.lower() + ".update", got, w.numpy(), K_OPT,
                            (prev_w[key].abs() + upd_abs).numpy())
            for s in slots:
                new = opt.state[leaves[key]][ref.STATE_NAMES[s]]
                old = prev_state.get(key + (s,))
                old = torch.zeros_like(w) if old is None else old
                cond = {"m": b1 * old.abs() + (1 - b1) * g.abs(),
                        "v": b2 * old.abs() + (1 - b2) * g * g,
                        "velocity": mu * old.abs() + g.abs()}[s]
                e = state_of[key + (s,)]
                chk.elementwise(what + " OPTIMIZER_STATE " + s, kind.lower() + ".update",
                                e.value(), new.numpy(), K_OPT, cond.numpy())
                prev_state[key + (s,)] = _t(e.value())
            prev_w[key] = _t(got)
    return chk.results, chk.problems
