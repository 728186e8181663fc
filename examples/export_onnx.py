#!/usr/bin/python3
"""Exports the zoo's large models from PyTorch as ONNX files.

usage: export_onnx.py OUT_DIR [MODEL ...]

Writes OUT_DIR/<model>.onnx for resnet18, mobilenet_v2, vit_tiny and
gpt_tiny (or only the models named): PyTorch nn.Modules of the same
architectures as examples/<model>/model.json, with PyTorch's own default
initialisation under a fixed seed per model, exported the way
docs/bring-your-own-model.md tells users to (opset 14, constant folding,
training=TrainingMode.PRESERVE so that batch norm stays in training mode,
a dynamic batch axis). `lockstep import OUT_DIR/<model>.onnx` then trains
the model from PyTorch's weights. The files are the same on every run of
the same PyTorch version; //tests/onnx:zoo_onnx_e2e_test runs this script.
"""
import math
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """examples/resnet18: the CIFAR ResNet-18 at stem width 8."""

    def __init__(self, width=8, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        blocks, cin = [], width
        for stage, mult in enumerate([1, 2, 4, 8]):
            for b in range(2):
                stride = 2 if stage > 0 and b == 0 else 1
                blocks.append(BasicBlock(cin, width * mult, stride))
                cin = width * mult
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        h = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def conv_bn(cin, cout, k, stride, groups=1):
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout)]


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, t, stride):
        super().__init__()
        hidden = cin * t
        layers = []
        if t != 1:
            layers += conv_bn(cin, hidden, 1, 1) + [nn.ReLU()]
        layers += conv_bn(hidden, hidden, 3, stride, groups=hidden)
        layers += [nn.ReLU()] + conv_bn(hidden, cout, 1, 1)
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        h = self.body(x)
        return h + x if self.residual else h


class MobileNetV2(nn.Module):
    """examples/mobilenet_v2: its make_model.py's stage table, ReLU."""

    STAGES = [(1, 8, 1, 1), (6, 12, 2, 1), (6, 16, 2, 2), (6, 24, 2, 2),
              (6, 32, 1, 1)]

    def __init__(self, stem=16, head=128, classes=10):
        super().__init__()
        layers = conv_bn(3, stem, 3, 2) + [nn.ReLU()]
        cin = stem
        for t, c, n, s in self.STAGES:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, t, s if i == 0 else 1))
                cin = c
        layers += conv_bn(cin, head, 1, 1) + [nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(head, classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


class Attention(nn.Module):
    """Multi-head self-attention written out: q, k, v, softmax, out."""

    def __init__(self, dim, heads, causal_len=0):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.causal = causal_len > 0
        if self.causal:
            self.register_buffer(
                "mask", torch.tril(torch.ones(causal_len, causal_len)).view(
                    1, 1, causal_len, causal_len))

    def forward(self, x):
        b, t, c = x.size()
        hs = c // self.heads

        def split(y):
            return y.view(b, t, self.heads, hs).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        if self.causal:
            # A large finite negative: ONNX importers refuse -inf constants.
            att = att.masked_fill(self.mask[:, :, :t, :t] == 0, -1e4)
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.out(y)


class Block(nn.Module):
    """A pre-LayerNorm transformer block with a 4x GELU MLP."""

    def __init__(self, dim, heads, causal_len=0):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal_len)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class VitTiny(nn.Module):
    """examples/vit_tiny: 4x4 patches, 64 tokens of width 64, 2 blocks."""

    def __init__(self, image=32, patch=4, dim=64, heads=4, blocks=2,
                 classes=10):
        super().__init__()
        tokens = (image // patch) ** 2
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.randn(tokens, dim) * 0.02)
        self.blocks = nn.Sequential(
            *[Block(dim, heads) for _ in range(blocks)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        h = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        h = self.ln_f(self.blocks(h))
        return self.head(h.mean(dim=1))


class GptTiny(nn.Module):
    """examples/gpt_tiny: byte-level, 4 pre-LN blocks, d_model 128."""

    def __init__(self, vocab=256, dim=128, heads=4, blocks=4, seq=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.Sequential(
            *[Block(dim, heads, causal_len=seq) for _ in range(blocks)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.lm_head(self.ln_f(self.blocks(self.emb(idx))))


# name: (constructor, example input of batch 4, seed)
MODELS = {
    "resnet18": (ResNet18, lambda: torch.randn(4, 3, 32, 32), 18),
    "mobilenet_v2": (MobileNetV2, lambda: torch.randn(4, 3, 32, 32), 2),
    "vit_tiny": (VitTiny, lambda: torch.randn(4, 3, 32, 32), 6),
    "gpt_tiny": (GptTiny, lambda: torch.randint(0, 256, (4, 16)), 1),
}


def export(name, path):
    make, example, seed = MODELS[name]
    torch.manual_seed(seed)
    model = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model.train(), example(), path,
            opset_version=14,
            do_constant_folding=True,
            training=torch.onnx.TrainingMode.PRESERVE,
            input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}})


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    for name in names:
        if name not in MODELS:
            sys.exit("unknown model %r (known: %s)" % (name, ", ".join(MODELS)))
    os.makedirs(out, exist_ok=True)
    for name in names:
        export(name, os.path.join(out, name + ".onnx"))


if __name__ == "__main__":
    main()
