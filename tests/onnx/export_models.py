#!/usr/bin/python3
"""Exports the small PyTorch models that the ONNX import tests read.

usage: export_models.py OUT_DIR

Every model is exported the way docs/bring-your-own-model.md tells users to:
torch.onnx.export with opset 14, constant folding on and
training=TrainingMode.PRESERVE (batch norm and dropout stay in the graph);
gpt_nofold.onnx is the GPT block without constant folding (tied weights
stay tied) and unsupported.onnx needs opset 16 for grid_sample.
Weights come from fixed seeds, so the files are the same on every run.
"""
import math
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.fc2 = nn.Linear(16, 16)
        self.out = nn.Linear(16, 5)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        return self.out(h)


class SmallCnn(nn.Module):
    """Conv + BatchNorm + a residual block with a depthwise convolution."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8, momentum=0.2)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.bn2 = nn.BatchNorm2d(8)
        self.pw = nn.Conv2d(8, 8, 1)
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(0.25)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = F.relu(self.bn1(self.stem(x)))
        r = F.relu(self.bn2(self.dw(h)))
        h = h + self.pw(r)
        h = self.pool(h)
        h = F.adaptive_avg_pool2d(h, 1).flatten(1)
        return self.head(self.drop(h))


class ConvAutoencoder(nn.Module):
    """A tiny conv encoder-decoder: stride-2 convolutions down, transposed
    convolutions (stride 2, output_padding 1) up, with batch norm, and a
    linear head on the reconstruction."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.dec = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1,
                                      output_padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(4)
        self.up = nn.ConvTranspose2d(4, 2, 2, stride=1, groups=2)
        self.head = nn.Linear(2 * 9 * 9, 3)

    def forward(self, x):
        h = F.relu(self.bn1(self.enc(x)))
        h = F.relu(self.bn2(self.dec(h)))
        return self.head(self.up(h).flatten(1))


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, block):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer(
            "mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        hs = c // self.heads
        q = q.view(b, t, self.heads, hs).transpose(1, 2)
        k = k.view(b, t, self.heads, hs).transpose(1, 2)
        v = v.view(b, t, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, -1e4)
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class TinyGpt(nn.Module):
    """One pre-norm transformer block, GELU MLP, tied embeddings."""

    def __init__(self, vocab=32, dim=16, heads=2, block=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Parameter(torch.randn(1, block, dim) * 0.02)
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, block)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_out = nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(0.1)
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe[:, :t, :]
        x = x + self.attn(self.ln1(x))
        x = x + self.drop(self.fc_out(F.gelu(self.fc(self.ln2(x)))))
        return self.lm_head(self.ln_f(x))


class WithLstm(nn.Module):
    """Unsupported: an LSTM and grid_sample."""

    def __init__(self):  # grid_sample needs opset 16
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        grid = torch.zeros(x.size(0), 2, 2, 2)
        img = x.view(x.size(0), 1, 6, 4)
        s = F.grid_sample(img, grid, align_corners=False)
        y, _ = self.lstm(x + s.mean())
        return self.fc(y[:, -1, :])


def export(model, example, path, dynamic_batch, opset=14, fold=True):
    model.train()
    kwargs = {}
    if dynamic_batch:
        kwargs["dynamic_axes"] = {"input": {0: "batch"}, "logits": {0: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, example, path,
            opset_version=opset,
            do_constant_folding=fold,
            training=torch.onnx.TrainingMode.PRESERVE,
            input_names=["input"], output_names=["logits"],
            **kwargs)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1)
    export(Mlp(), torch.randn(4, 12), os.path.join(out, "mlp.onnx"), False)
    torch.manual_seed(2)
    export(SmallCnn(), torch.randn(2, 3, 8, 8),
           os.path.join(out, "cnn.onnx"), True)
    torch.manual_seed(5)
    export(ConvAutoencoder(), torch.randn(2, 3, 8, 8),
           os.path.join(out, "autoencoder.onnx"), True)
    torch.manual_seed(3)
    export(TinyGpt(), torch.randint(0, 32, (2, 8)),
           os.path.join(out, "gpt.onnx"), True)
    # Without constant folding the tie of lm_head to the embedding stays.
    torch.manual_seed(3)
    export(TinyGpt(), torch.randint(0, 32, (2, 8)),
           os.path.join(out, "gpt_nofold.onnx"), True, fold=False)
    torch.manual_seed(4)
    export(WithLstm(), torch.randn(2, 6, 4),
           os.path.join(out, "unsupported.onnx"), False, opset=16)


if __name__ == "__main__":
    main()
