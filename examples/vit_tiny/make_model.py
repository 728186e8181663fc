#!/usr/bin/env python3
"""Writes model.json: a small Vision Transformer for 32x32 inputs.

Dosovitskiy et al.'s ViT at toy size: 4x4 patches embedded by a strided
convolution (64 tokens), a learned positional embedding (a PARAMETER added
with broadcasting over the batch), pre-LayerNorm blocks of bidirectional
multi-head self-attention and a 4x GELU MLP with residual ADDs, a final
LayerNorm, the mean over tokens (REDUCE, as in the paper's global-pool
variant, instead of a class token) and a linear classifier.

  python3 examples/vit_tiny/make_model.py > examples/vit_tiny/model.json
"""
import json
import math

IMAGE, PATCH, D, HEADS, BLOCKS, CLASSES = 32, 4, 64, 4, 2, 10


def main():
    t = (IMAGE // PATCH) ** 2
    dh = D // HEADS
    layers = [
        {"name": "patch", "op": "CONV2D",
         "conv2d": {"filters": D, "kernel_h": PATCH, "kernel_w": PATCH,
                    "stride_h": PATCH, "stride_w": PATCH, "use_bias": True}},
        {"name": "patch_flat", "op": "RESHAPE", "reshape": {"shape": [D, t]}},
        {"name": "tokens", "op": "TRANSPOSE", "transpose": {"perm": [0, 2, 1]}},
        {"name": "pos", "op": "PARAMETER", "parameter": {"shape": [t, D]}},
        {"name": "embed", "op": "BINARY", "inputs": ["tokens", "pos"],
         "binary": {"kind": "BINARY_ADD"}},
    ]
    prev = "embed"

    def dense(name, src, units):
        layers.append({"name": name, "op": "DENSE", "inputs": [src],
                       "dense": {"units": units, "use_bias": True,
                                 "last_axis": True}})

    for b in range(BLOCKS):
        p = "b%d." % b
        layers.append({"name": p + "ln1", "op": "LAYER_NORM", "inputs": [prev]})
        for x in ("q", "k", "v"):
            dense(p + x, p + "ln1", D)
            layers.append({"name": p + x + "_heads", "op": "RESHAPE",
                           "inputs": [p + x],
                           "reshape": {"shape": [t, HEADS, dh]}})
            layers.append({"name": p + x + "_t", "op": "TRANSPOSE",
                           "inputs": [p + x + "_heads"],
                           "transpose": {"perm": [0, 2, 1, 3]}})
        layers.append({"name": p + "scores", "op": "MATMUL",
                       "inputs": [p + "q_t", p + "k_t"],
                       "matmul": {"transpose_b": True,
                                  "scale": 1.0 / math.sqrt(dh)}})
        layers.append({"name": p + "probs", "op": "SOFTMAX",
                       "inputs": [p + "scores"]})
        layers.append({"name": p + "ctx", "op": "MATMUL",
                       "inputs": [p + "probs", p + "v_t"]})
        layers.append({"name": p + "ctx_t", "op": "TRANSPOSE",
                       "inputs": [p + "ctx"],
                       "transpose": {"perm": [0, 2, 1, 3]}})
        layers.append({"name": p + "ctx_merged", "op": "RESHAPE",
                       "inputs": [p + "ctx_t"], "reshape": {"shape": [t, -1]}})
        dense(p + "attn_out", p + "ctx_merged", D)
        layers.append({"name": p + "res1", "op": "ADD",
                       "inputs": [prev, p + "attn_out"]})
        layers.append({"name": p + "ln2", "op": "LAYER_NORM",
                       "inputs": [p + "res1"]})
        dense(p + "fc", p + "ln2", 4 * D)
        layers.append({"name": p + "gelu", "op": "GELU", "inputs": [p + "fc"]})
        dense(p + "proj", p + "gelu", D)
        layers.append({"name": p + "res2", "op": "ADD",
                       "inputs": [p + "res1", p + "proj"]})
        prev = p + "res2"
    layers += [
        {"name": "ln_f", "op": "LAYER_NORM", "inputs": [prev]},
        {"name": "pool", "op": "REDUCE",
         "reduce": {"kind": "REDUCE_MEAN", "axes": [1]}},
        {"name": "head", "op": "DENSE",
         "dense": {"units": CLASSES, "use_bias": True}},
        {"name": "loss", "op": "SOFTMAX_XENT"},
    ]
    model = {"name": "vit_tiny", "input_shape": [3, IMAGE, IMAGE],
             "num_classes": CLASSES, "initializer": "GLOROT_UNIFORM",
             "layers": layers}
    out = ['{', '  "name": "vit_tiny",',
           '  "input_shape": [3, %d, %d],' % (IMAGE, IMAGE),
           '  "num_classes": %d,' % CLASSES,
           '  "initializer": "GLOROT_UNIFORM",', '  "layers": [']
    out.append(",\n".join("    " + json.dumps(l) for l in layers))
    out += ['  ]', '}']
    print("\n".join(out))


if __name__ == "__main__":
    main()
