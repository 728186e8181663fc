#!/usr/bin/python3
"""PyTorch step time of a Lockstep zoo model, for step_bench's comparison.

usage: torch_step_bench.py model.json config.json STEPS

Builds the same layers (NCHW, same shapes, same optimizer and batch size)
in PyTorch on one CPU thread, trains on random data for 2 warm-up steps and
STEPS timed steps, and prints the mean milliseconds per step. Numerics are
not compared: this is only a speed reference.
"""
import json
import sys
import time

import torch
import torch.nn.functional as F


def build(model, batch):
    """Returns (params, forward(x, labels) -> loss)."""
    params = []
    steps = []  # (name, op, input names, fn)
    shapes = {"__input__": [batch] + list(model["input_shape"])}
    prev = "__input__"
    for layer in model["layers"]:
        name, op = layer["name"], layer["op"]
        ins = layer.get("inputs") or [prev]
        shape = shapes[ins[0]]
        fn = None
        if op == "DENSE":
            p = layer.get("dense", {})
            features = 1
            for d in shape[1:]:
                features *= d
            w = torch.nn.Parameter(torch.randn(features, p["units"]) * 0.1)
            b = torch.nn.Parameter(torch.zeros(p["units"])) if p.get("use_bias") else None
            params += [w] + ([b] if b is not None else [])
            fn = (lambda w, b: lambda a: (a.flatten(1) @ w) + (b if b is not None else 0))(w, b)
            out = [shape[0], p["units"]]
        elif op == "CONV2D":
            p = layer["conv2d"]
            sh, sw = p.get("stride_h") or 1, p.get("stride_w") or 1
            dh, dw = p.get("dilation_h") or 1, p.get("dilation_w") or 1
            ph, pw = p.get("pad_h", 0), p.get("pad_w", 0)
            kh, kw = p["kernel_h"], p["kernel_w"]
            w = torch.nn.Parameter(torch.randn(p["filters"], shape[1], kh, kw) * 0.1)
            b = torch.nn.Parameter(torch.zeros(p["filters"])) if p.get("use_bias") else None
            params += [w] + ([b] if b is not None else [])
            fn = (lambda w, b, s, pd, dl: lambda a: F.conv2d(a, w, b, s, pd, dl))(
                w, b, (sh, sw), (ph, pw), (dh, dw))
            oh = (shape[2] + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
            ow = (shape[3] + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
            out = [shape[0], p["filters"], oh, ow]
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
            out = shape
        elif op == "FLATTEN":
            fn = lambda a: a.flatten(1)
            f = 1
            for d in shape[1:]:
                f *= d
            out = [shape[0], f]
        elif op == "ADD":
            fn = lambda a, b: a + b
            out = shape
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
            out = shape
        elif op == "SOFTMAX_XENT":
            fn = None
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
                loss = F.cross_entropy(args[0], labels)
            else:
                vals[name] = fn(*args)
        return loss

    return params, forward


def main():
    model = json.load(open(sys.argv[1]))
    config = json.load(open(sys.argv[2]))
    steps = int(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(config.get("seed", 0))
    batch = config["batch_size"]
    params, forward = build(model, batch)
    opt = config.get("optimizer", {})
    kind, lr = opt.get("kind", "SGD"), opt.get("learning_rate", 0.01)
    if kind == "ADAM":
        optimizer = torch.optim.Adam(params, lr=lr, betas=(opt.get("beta1") or 0.9,
                                                           opt.get("beta2") or 0.999),
                                     eps=opt.get("epsilon") or 1e-7)
    elif kind == "MOMENTUM":
        optimizer = torch.optim.SGD(params, lr=lr, momentum=opt.get("momentum", 0.0))
    else:
        optimizer = torch.optim.SGD(params, lr=lr)
    x = torch.rand([batch] + list(model["input_shape"])) * 2 - 1
    labels = torch.randint(0, model["num_classes"], (batch,))

    def step():
        optimizer.zero_grad()
        loss = forward(x, labels)
        loss.backward()
        optimizer.step()

    for _ in range(2):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    print("%.6f" % ((time.perf_counter() - start) * 1000.0 / steps))


if __name__ == "__main__":
    main()
