#!/usr/bin/env python3
"""Writes a GPT-style decoder as a Lockstep model.json (stdout).

usage: make_gpt.py NAME SEQ_LEN D_MODEL HEADS LAYERS VOCAB

Byte-level embedding, pre-LayerNorm blocks of causal multi-head
self-attention (Q/K/V/out projections, per-head scores scaled by
1/sqrt(d_head), causal softmax) and a 4x GELU MLP, residual ADDs, a final
LayerNorm and a vocabulary projection with next-token loss.
"""
import json
import math
import sys


def main():
    name, t, d, heads, n_layers, vocab = sys.argv[1], *map(int, sys.argv[2:7])
    dh = d // heads
    layers = [{"name": "emb", "op": "EMBEDDING",
               "embedding": {"vocab_size": vocab, "dim": d}}]
    prev = "emb"

    def dense(name, src, units):
        layers.append({"name": name, "op": "DENSE", "inputs": [src],
                       "dense": {"units": units, "use_bias": True, "last_axis": True}})

    for b in range(n_layers):
        p = "b%d." % b
        layers.append({"name": p + "ln1", "op": "LAYER_NORM", "inputs": [prev]})
        for x in ("q", "k", "v"):
            dense(p + x, p + "ln1", d)
            layers.append({"name": p + x + "_heads", "op": "RESHAPE", "inputs": [p + x],
                           "reshape": {"shape": [t, heads, dh]}})
            layers.append({"name": p + x + "_t", "op": "TRANSPOSE", "inputs": [p + x + "_heads"],
                           "transpose": {"perm": [0, 2, 1, 3]}})
        layers.append({"name": p + "scores", "op": "MATMUL", "inputs": [p + "q_t", p + "k_t"],
                       "matmul": {"transpose_b": True, "scale": 1.0 / math.sqrt(dh)}})
        layers.append({"name": p + "probs", "op": "SOFTMAX", "inputs": [p + "scores"],
                       "softmax": {"causal": True}})
        layers.append({"name": p + "ctx", "op": "MATMUL", "inputs": [p + "probs", p + "v_t"]})
        layers.append({"name": p + "ctx_t", "op": "TRANSPOSE", "inputs": [p + "ctx"],
                       "transpose": {"perm": [0, 2, 1, 3]}})
        layers.append({"name": p + "ctx_merged", "op": "RESHAPE", "inputs": [p + "ctx_t"],
                       "reshape": {"shape": [t, -1]}})
        dense(p + "attn_out", p + "ctx_merged", d)
        layers.append({"name": p + "res1", "op": "ADD", "inputs": [prev, p + "attn_out"]})
        layers.append({"name": p + "ln2", "op": "LAYER_NORM", "inputs": [p + "res1"]})
        dense(p + "fc", p + "ln2", 4 * d)
        layers.append({"name": p + "gelu", "op": "GELU", "inputs": [p + "fc"]})
        dense(p + "proj", p + "gelu", d)
        layers.append({"name": p + "res2", "op": "ADD", "inputs": [p + "res1", p + "proj"]})
        prev = p + "res2"
    layers.append({"name": "ln_f", "op": "LAYER_NORM", "inputs": [prev]})
    dense("logits", "ln_f", vocab)
    layers.append({"name": "loss", "op": "SOFTMAX_XENT"})
    out = ['{', '  "name": %s,' % json.dumps(name), '  "input_shape": [%d],' % t,
           '  "num_classes": %d,' % vocab, '  "initializer": "GLOROT_UNIFORM",', '  "layers": [']
    out.append(",\n".join("    " + json.dumps(l) for l in layers))
    out += ['  ]', '}']
    print("\n".join(out))


if __name__ == "__main__":
    main()
