#!/usr/bin/python3
"""PyTorch step time of a Lockstep model, for step_bench's comparison.

usage: torch_step_bench.py model.json config.json STEPS THREADS

Builds the same layers (NCHW, same shapes, same optimizer, gradient clipping
and batch size) in PyTorch on THREADS CPU threads, trains on random data for
2 warm-up steps and STEPS timed steps, and prints one line: the mean
milliseconds per step, the process's CPU time over the wall time of the
timed steps (how many cores it kept busy), and the number of threads the
process had at the end. Numerics are not compared: this is only a speed
reference. Runs under /usr/bin/python3 (Debian's python3-torch).

THREADS pins every pool PyTorch computes on: torch.set_num_threads sizes
its OpenMP pool (oneDNN's convolutions, its own elementwise kernels), but
Debian's PyTorch does its dense products and matmuls in the system BLAS
(OpenBLAS), whose own pool starts one thread per core unless
OPENBLAS_NUM_THREADS says otherwise. Those variables are read when the
libraries load, so they are set here, before torch is imported.
"""
import json
import math
import os
import sys
import time

THREADS = int(sys.argv[4]) if len(sys.argv) > 4 else 1
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "BLIS_NUM_THREADS"):
    os.environ[_var] = str(THREADS)

import torch  # noqa: E402  (after the thread variables)
import torch.nn.functional as F  # noqa: E402


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def build(model, batch):
    """Returns (params, forward(x, labels) -> loss, token_input)."""
    params = []
    steps = []  # (name, op, input names, fn)
    layers = model["layers"]
    # Only the first layer reads the model input: token ids when it is an
    # EMBEDDING.
    token_input = layers[0]["op"] == "EMBEDDING"
    shapes = {"__input__": [batch] + list(model["input_shape"])}
    prev = "__input__"
    for layer in layers:
        name, op = layer["name"], layer["op"]
        ins = layer.get("inputs") or ([] if op == "PARAMETER" else [prev])
        ins = ["__input__" if i == "<input>" else i for i in ins]
        shape = shapes[ins[0]] if ins else None
        fn = None
        out = shape
        if op == "DENSE":
            p = layer.get("dense", {})
            last_axis = p.get("last_axis", False)
            features = shape[-1] if last_axis else numel(shape[1:])
            bound = math.sqrt(6.0 / (features + p["units"]))
            w = torch.nn.Parameter((torch.rand(features, p["units"]) * 2 - 1) * bound)
            b = torch.nn.Parameter(torch.zeros(p["units"])) if p.get("use_bias") else None
            params += [w] + ([b] if b is not None else [])
            if last_axis:
                fn = (lambda w, b: lambda a: (a @ w) + (b if b is not None else 0))(w, b)
                out = shape[:-1] + [p["units"]]
            else:
                fn = (lambda w, b: lambda a: (a.flatten(1) @ w) + (b if b is not None else 0))(w, b)
                out = [shape[0], p["units"]]
        elif op == "CONV2D":
            p = layer["conv2d"]
            sh, sw = p.get("stride_h") or 1, p.get("stride_w") or 1
            dh, dw = p.get("dilation_h") or 1, p.get("dilation_w") or 1
            ph, pw = p.get("pad_h", 0), p.get("pad_w", 0)
            kh, kw = p["kernel_h"], p["kernel_w"]
            groups = p.get("groups") or 1
            w = torch.nn.Parameter(torch.randn(p["filters"], shape[1] // groups, kh, kw) * 0.1)
            b = torch.nn.Parameter(torch.zeros(p["filters"])) if p.get("use_bias") else None
            params += [w] + ([b] if b is not None else [])
            fn = (lambda w, b, s, pd, dl, g: lambda a: F.conv2d(a, w, b, s, pd, dl, g))(
                w, b, (sh, sw), (ph, pw), (dh, dw), groups)
            oh = (shape[2] + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
            ow = (shape[3] + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
            out = [shape[0], p["filters"], oh, ow]
        elif op == "CONV_TRANSPOSE2D":
            # The weight is [C_in, filters / groups, kh, kw], as PyTorch's.
            p = layer["conv2d"]
            sh, sw = p.get("stride_h") or 1, p.get("stride_w") or 1
            dh, dw = p.get("dilation_h") or 1, p.get("dilation_w") or 1
            ph, pw = p.get("pad_h", 0), p.get("pad_w", 0)
            oph, opw = p.get("output_padding_h", 0), p.get("output_padding_w", 0)
            kh, kw = p["kernel_h"], p["kernel_w"]
            groups = p.get("groups") or 1
            w = torch.nn.Parameter(
                torch.randn(shape[1], p["filters"] // groups, kh, kw) * 0.1)
            b = torch.nn.Parameter(torch.zeros(p["filters"])) if p.get("use_bias") else None
            params += [w] + ([b] if b is not None else [])
            fn = (lambda w, b, s, pd, op_, g, dl: lambda a: F.conv_transpose2d(
                a, w, b, s, pd, op_, g, dl))(
                    w, b, (sh, sw), (ph, pw), (oph, opw), groups, (dh, dw))
            oh = (shape[2] - 1) * sh - 2 * ph + dh * (kh - 1) + 1 + oph
            ow = (shape[3] - 1) * sw - 2 * pw + dw * (kw - 1) + 1 + opw
            out = [shape[0], p["filters"], oh, ow]
        elif op == "PARAMETER":
            pshape = list(layer["parameter"]["shape"])
            v = torch.nn.Parameter(torch.randn(*pshape) * 0.02)
            params.append(v)
            fn = (lambda v: lambda: v)(v)
            out = pshape
        elif op == "BINARY":
            kind = layer.get("binary", {}).get("kind", "BINARY_ADD")
            fns = {"BINARY_ADD": torch.add, "BINARY_SUB": torch.sub,
                   "BINARY_MUL": torch.mul, "BINARY_DIV": torch.div,
                   "BINARY_POW": torch.pow, "BINARY_MAX": torch.maximum,
                   "BINARY_MIN": torch.minimum}
            fn = fns[kind]
            other = shapes[ins[1]]
            rank = max(len(shape), len(other))
            a = [1] * (rank - len(shape)) + shape
            b = [1] * (rank - len(other)) + other
            out = [max(x, y) for x, y in zip(a, b)]
        elif op == "REDUCE":
            p = layer.get("reduce", {})
            axes = list(p.get("axes") or range(1, len(shape)))
            axes = [a % len(shape) for a in axes]
            keep = p.get("keepdims", False)
            mean = p.get("kind") == "REDUCE_MEAN"
            fn = (lambda ax, k, m: lambda a: (a.mean(dim=ax, keepdim=k) if m
                                              else a.sum(dim=ax, keepdim=k)))(
                                                  tuple(axes), keep, mean)
            out = [1 if d in axes else n for d, n in enumerate(shape)
                   if keep or d not in axes]
        elif op in ("MAX_POOL2D", "AVG_POOL2D"):
            p = layer["pool"]
            kh, kw = p["kernel_h"], p["kernel_w"]
            sh, sw = p.get("stride_h") or kh, p.get("stride_w") or kw
            ph, pw = p.get("pad_h", 0), p.get("pad_w", 0)
            if op == "MAX_POOL2D":
                fn = (lambda k, s, pd: lambda a: F.max_pool2d(a, k, s, pd))((kh, kw), (sh, sw), (ph, pw))
            else:
                fn = (lambda k, s, pd: lambda a: F.avg_pool2d(a, k, s, pd, count_include_pad=True))(
                    (kh, kw), (sh, sw), (ph, pw))
            out = [shape[0], shape[1], (shape[2] + 2 * ph - kh) // sh + 1,
                   (shape[3] + 2 * pw - kw) // sw + 1]
        elif op == "GLOBAL_AVG_POOL":
            fn = lambda a: a.mean(dim=(2, 3))
            out = shape[:2]
        elif op == "RELU":
            fn = F.relu
        elif op == "SIGMOID":
            fn = torch.sigmoid
        elif op == "TANH":
            fn = torch.tanh
        elif op == "SILU":
            fn = F.silu
        elif op == "GELU":
            fn = F.gelu
        elif op == "GELU_TANH":
            fn = lambda a: F.gelu(a, approximate="tanh")
        elif op == "SOFTMAX":
            if layer.get("softmax", {}).get("causal"):
                t = shape[-1]
                mask = torch.ones(t, t, dtype=torch.bool).triu(1)
                fn = (lambda m: lambda a: F.softmax(a.masked_fill(m, float("-inf")), dim=-1))(mask)
            else:
                fn = lambda a: F.softmax(a, dim=-1)
        elif op == "MATMUL":
            p = layer.get("matmul", {})
            ta, tb = p.get("transpose_a", False), p.get("transpose_b", False)
            scale = p.get("scale") or 1.0
            fn = (lambda ta, tb, sc: lambda a, b: (
                (a.transpose(-1, -2) if ta else a) @ (b.transpose(-1, -2) if tb else b)) * sc)(
                    ta, tb, scale)
            sb = shapes[ins[1]]
            m = shape[-1] if ta else shape[-2]
            n = sb[-2] if tb else sb[-1]
            out = shape[:-2] + [m, n]
        elif op == "TRANSPOSE":
            perm = layer["transpose"]["perm"]
            fn = (lambda perm: lambda a: a.permute(*perm))(perm)
            out = [shape[d] for d in perm]
        elif op == "RESHAPE":
            target = list(layer["reshape"]["shape"])
            if -1 in target:
                known = numel([d for d in target if d != -1])
                target[target.index(-1)] = numel(shape[1:]) // known
            fn = (lambda t: lambda a: a.reshape([a.shape[0]] + t))(target)
            out = [shape[0]] + target
        elif op == "LAYER_NORM":
            w = torch.nn.Parameter(torch.ones(shape[-1]))
            b = torch.nn.Parameter(torch.zeros(shape[-1]))
            params += [w, b]
            fn = (lambda w, b: lambda a: F.layer_norm(a, a.shape[-1:], w, b, 1e-5))(w, b)
        elif op == "BATCH_NORM":
            p = layer.get("batch_norm", {})
            c = shape[1]
            w = torch.nn.Parameter(torch.ones(c))
            b = torch.nn.Parameter(torch.zeros(c))
            params += [w, b]
            mean, var = torch.zeros(c), torch.ones(c)
            training = not p.get("eval", False)
            momentum = p.get("momentum") or 0.1
            eps = p.get("epsilon") or 1e-5
            fn = (lambda w, b, m, v, t, mo, e: lambda a: F.batch_norm(
                a, m, v, w, b, training=t, momentum=mo, eps=e))(
                    w, b, mean, var, training, momentum, eps)
        elif op == "EMBEDDING":
            p = layer["embedding"]
            w = torch.nn.Parameter(torch.randn(p["vocab_size"], p["dim"]) * 0.1)
            params.append(w)
            fn = (lambda w: lambda ids: F.embedding(ids, w))(w)
            out = shape + [p["dim"]]
        elif op == "DROPOUT":
            rate = layer.get("dropout", {}).get("rate", 0.0)
            fn = (lambda r: lambda a: F.dropout(a, r, training=True))(rate)
        elif op == "FLATTEN":
            fn = lambda a: a.flatten(1)
            out = [shape[0], numel(shape[1:])]
        elif op == "ADD":
            fn = lambda a, b: a + b
        elif op == "RESIZE_BILINEAR":
            p = layer["resize"]
            size = (p["out_h"], p["out_w"])
            fn = (lambda size: lambda a: F.interpolate(a, size=size, mode="bilinear",
                                                       align_corners=False))(size)
            out = [shape[0], shape[1], p["out_h"], p["out_w"]]
        elif op == "BIAS_ADD":
            b = torch.nn.Parameter(torch.zeros(shape[1]))
            params.append(b)
            view = [1, shape[1]] + [1] * (len(shape) - 2)
            fn = (lambda b, v: lambda a: a + b.view(v))(b, view)
        elif op == "SOFTMAX_XENT":
            out = [1]
        else:
            raise ValueError("unsupported op " + op)
        steps.append((name, op, ins, fn))
        shapes[name] = out
        prev = name

    def forward(x, labels):
        vals = {"__input__": x}
        loss = None
        for name, op, ins, fn in steps:
            args = [vals[i] for i in ins]
            if op == "SOFTMAX_XENT":
                logits = args[0]
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       labels.reshape(-1))
            else:
                vals[name] = fn(*args)
        return loss

    return params, forward, token_input


def main():
    model = json.load(open(sys.argv[1]))
    config = json.load(open(sys.argv[2]))
    steps = int(sys.argv[3])
    torch.set_num_threads(THREADS)
    torch.manual_seed(config.get("seed", 0))
    batch = config["batch_size"]
    params, forward, token_input = build(model, batch)
    opt = config.get("optimizer", {})
    kind, lr = opt.get("kind", "SGD"), opt.get("learning_rate", 0.01)
    betas = (opt.get("beta1") or 0.9, opt.get("beta2") or 0.999)
    eps = opt.get("epsilon") or 1e-7
    if kind == "ADAM":
        optimizer = torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)
    elif kind == "ADAMW":
        optimizer = torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps,
                                      weight_decay=opt.get("weight_decay") or 0.01)
    elif kind == "MOMENTUM":
        optimizer = torch.optim.SGD(params, lr=lr, momentum=opt.get("momentum", 0.0))
    else:
        optimizer = torch.optim.SGD(params, lr=lr)
    clip = opt.get("clip_grad_norm") or 0.0
    classes = model["num_classes"]
    if token_input:
        # Token ids [N, T] and next-token labels [N, T].
        vocab = next(l["embedding"]["vocab_size"] for l in model["layers"]
                     if l["op"] == "EMBEDDING")
        x = torch.randint(0, vocab, [batch] + list(model["input_shape"]))
        labels = torch.randint(0, classes, [batch] + list(model["input_shape"]))
    else:
        x = torch.rand([batch] + list(model["input_shape"])) * 2 - 1
        labels = torch.randint(0, classes, (batch,))

    def step():
        optimizer.zero_grad()
        loss = forward(x, labels)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()

    for _ in range(2):
        step()
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    print("%.6f %.3f %d" % (wall * 1000.0 / steps, cpu / wall,
                            len(os.listdir("/proc/self/task"))))


if __name__ == "__main__":
    main()
