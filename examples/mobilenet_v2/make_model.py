#!/usr/bin/env python3
"""Writes model.json: a MobileNet-v2-style network for 32x32 inputs.

Sandler et al.'s inverted residual blocks: a 1x1 expansion (factor t) with
batch norm and ReLU, a depthwise 3x3 convolution (groups = channels) with
batch norm and ReLU, a linear 1x1 projection with batch norm, and a
residual ADD when the block keeps stride 1 and its channel count. The
paper's ReLU6 is a ReLU here (Lockstep has no clipped ReLU). The stage
table (t, c, n, s) follows the paper's shape at a reduced width so that a
training step stays in tens of milliseconds:

  python3 examples/mobilenet_v2/make_model.py > examples/mobilenet_v2/model.json
"""
import json

# (expansion t, output channels c, blocks n, first stride s)
STAGES = [(1, 8, 1, 1), (6, 12, 2, 1), (6, 16, 2, 2), (6, 24, 2, 2),
          (6, 32, 1, 1)]
STEM = 16
HEAD = 128


def conv(name, filters, k, stride, groups=1, inputs=None):
    params = {"filters": filters, "kernel_h": k, "kernel_w": k,
              "stride_h": stride, "stride_w": stride,
              "pad_h": k // 2, "pad_w": k // 2, "use_bias": False}
    if groups > 1:
        params["groups"] = groups
    layer = {"name": name, "op": "CONV2D", "conv2d": params}
    if inputs:
        layer["inputs"] = inputs
    return layer


def main():
    layers = [conv("stem", STEM, 3, 2),
              {"name": "stem_bn", "op": "BATCH_NORM"},
              {"name": "stem_relu", "op": "RELU"}]
    prev, channels, index = "stem_relu", STEM, 0
    for t, c, n, s in STAGES:
        for i in range(n):
            index += 1
            p = "b%d" % index
            stride = s if i == 0 else 1
            hidden = channels * t
            src = prev
            if t != 1:
                layers += [conv(p + "_expand", hidden, 1, 1, inputs=[prev]),
                           {"name": p + "_expand_bn", "op": "BATCH_NORM"},
                           {"name": p + "_expand_relu", "op": "RELU"}]
                src = p + "_expand_relu"
            layers += [conv(p + "_dw", hidden, 3, stride, groups=hidden,
                            inputs=[src]),
                       {"name": p + "_dw_bn", "op": "BATCH_NORM"},
                       {"name": p + "_dw_relu", "op": "RELU"},
                       conv(p + "_project", c, 1, 1),
                       {"name": p + "_project_bn", "op": "BATCH_NORM"}]
            out = p + "_project_bn"
            if stride == 1 and channels == c:
                layers.append({"name": p + "_add", "op": "ADD",
                               "inputs": [out, prev]})
                out = p + "_add"
            prev, channels = out, c
    layers += [conv("head", HEAD, 1, 1, inputs=[prev]),
               {"name": "head_bn", "op": "BATCH_NORM"},
               {"name": "head_relu", "op": "RELU"},
               {"name": "pool", "op": "GLOBAL_AVG_POOL"},
               {"name": "fc", "op": "DENSE",
                "dense": {"units": 10, "use_bias": True}},
               {"name": "loss", "op": "SOFTMAX_XENT"}]
    model = {"name": "mobilenet_v2", "input_shape": [3, 32, 32],
             "num_classes": 10, "initializer": "HE_UNIFORM", "layers": layers}
    print(json.dumps(model, indent=1))


if __name__ == "__main__":
    main()
