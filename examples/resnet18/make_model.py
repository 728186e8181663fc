#!/usr/bin/env python3
"""Writes model.json: ResNet-18 for 32x32 inputs (the CIFAR variant).

The topology of He et al.'s ResNet-18 as it is trained on CIFAR-10: a 3x3
stem without max-pool, four stages of two BasicBlocks (3x3 conv, batch norm,
ReLU, 3x3 conv, batch norm, residual ADD, ReLU), stride 2 and a 1x1
projection with batch norm at the start of stages 2-4, global average pool,
a dense classifier. `--width` is the stem's channel count (the paper's is
64; the zoo uses 8 so that a training step stays in tens of milliseconds;
worker/exec/bench_models/resnet18_cifar is the full-width model).

  python3 examples/resnet18/make_model.py --width 8 > examples/resnet18/model.json
"""
import argparse
import json


def conv(name, filters, k, stride, inputs=None):
    layer = {"name": name, "op": "CONV2D",
             "conv2d": {"filters": filters, "kernel_h": k, "kernel_w": k,
                        "stride_h": stride, "stride_w": stride,
                        "pad_h": k // 2, "pad_w": k // 2, "use_bias": False}}
    if inputs:
        layer["inputs"] = inputs
    return layer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--name", default="resnet18")
    args = ap.parse_args()
    w = args.width
    layers = [conv("conv1", w, 3, 1),
              {"name": "bn1", "op": "BATCH_NORM"},
              {"name": "relu1", "op": "RELU"}]
    prev = "relu1"
    channels = w
    for stage, mult in enumerate([1, 2, 4, 8], start=1):
        filters = w * mult
        for block in range(2):
            p = "l%db%d" % (stage, block)
            stride = 2 if stage > 1 and block == 0 else 1
            layers += [conv(p + "_conv1", filters, 3, stride, [prev]),
                       {"name": p + "_bn1", "op": "BATCH_NORM"},
                       {"name": p + "_relu1", "op": "RELU"},
                       conv(p + "_conv2", filters, 3, 1),
                       {"name": p + "_bn2", "op": "BATCH_NORM"}]
            shortcut = prev
            if stride != 1 or channels != filters:
                layers += [conv(p + "_down", filters, 1, stride, [prev]),
                           {"name": p + "_down_bn", "op": "BATCH_NORM"}]
                shortcut = p + "_down_bn"
            layers += [{"name": p + "_add", "op": "ADD",
                        "inputs": [p + "_bn2", shortcut]},
                       {"name": p + "_out", "op": "RELU"}]
            prev = p + "_out"
            channels = filters
    layers += [{"name": "pool", "op": "GLOBAL_AVG_POOL"},
               {"name": "fc", "op": "DENSE",
                "dense": {"units": 10, "use_bias": True}},
               {"name": "loss", "op": "SOFTMAX_XENT"}]
    model = {"name": args.name, "input_shape": [3, 32, 32], "num_classes": 10,
             "initializer": "HE_UNIFORM", "layers": layers}
    print(json.dumps(model, indent=1))


if __name__ == "__main__":
    main()
