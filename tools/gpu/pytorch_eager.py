#!/usr/bin/env python3
"""PyTorch eager on the GPU: the side-by-side of dpe's `bench --device cuda`, same models, batches
and optimizers, FP32 without TF32 (as dpe's cuBLAS and cuDNN calls), one training step timed as
the median of --steps after --warmup, each step ended by torch.cuda.synchronize().

Models as dpe builds them: mlp (784-512-512-10, ReLU) and convnet (two blocks of conv 5x5 pad 2,
BatchNorm, ReLU, 2x2 max pooling, then a linear layer) on Fashion-MNIST's first training images,
SGD lr 0.01 momentum 0.9; gpt-small (4 layers, d 256, 4 heads, context 128) and gpt2 (12 layers,
d 768, 12 heads, context 1024, dropout 0.1), vocabulary 32000, tied head, random tokens, AdamW
lr 1e-3 after clipping the gradients' norm at 1.0. Uses only the PyTorch that is there:

  python3 tools/gpu/pytorch_eager.py --data-dir DIR --json out.json
"""
import argparse
import gzip
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530  # engine/data/fashion_mnist.h
VOCAB = 32000  # tools/bench_lib/bench_runner.cc: kLmVocab
GPT = {"gpt-small": dict(n_layer=4, n_head=4, d=256, ctx=128, dropout=0.0),
       "gpt2": dict(n_layer=12, n_head=12, d=768, ctx=1024, dropout=0.1)}


def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 5, padding=2), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.MaxPool2d(2))


def vision_model(name):
    if name == "convnet":
        return nn.Sequential(conv_block(1, 16), conv_block(16, 32), nn.Flatten(),
                             nn.Linear(7 * 7 * 32, 10))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                         nn.ReLU(), nn.Linear(512, 10))


class Block(nn.Module):
    def __init__(self, d, h, p):
        super().__init__()
        self.h, self.p = h, p
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(p)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, 2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        # The attention as dpe computes it (bmm, masked softmax, bmm), not a fused kernel.
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.h)
        att = self.drop(att.masked_fill(~mask[:t, :t], float("-inf")).softmax(-1))
        x = x + self.drop(self.attn_proj((att @ v).transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class Gpt(nn.Module):
    def __init__(self, n_layer, n_head, d, ctx, dropout):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, d), nn.Embedding(ctx, d)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(d, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("mask", torch.ones(ctx, ctx, dtype=torch.bool).tril())

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x, self.mask)
        return self.ln_f(x) @ self.wte.weight.t()


def fashion_batch(data_dir, n, device):
    import numpy as np
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    idx = np.arange(n) % len(labels)  # the bench's batch: images 0..n-1, wrapping
    x = (torch.from_numpy(images[idx].astype(np.float32)) / 255.0 - MEAN) / STD
    return x.to(device), torch.from_numpy(labels[idx].astype(np.int64)).to(device)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_step_ms(step, a, device):
    times = []
    for i in range(a.warmup + a.steps):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        if i >= a.warmup:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def run_model(name, batch, a, device):
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if name in GPT:
        cfg = GPT[name]
        model = Gpt(**cfg).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        tok = torch.randint(0, VOCAB, (batch, cfg["ctx"] + 1), device=device)
        x, y = tok[:, :-1], tok[:, 1:]

        def step():
            loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        tokens = batch * cfg["ctx"]
    else:
        model = vision_model(name).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = fashion_batch(a.data_dir, batch, device)

        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        tokens = None
    ms = median_step_ms(step, a, device)
    row = {"model": name, "batch": batch, "step_ms": ms, "samples_per_second": batch / ms * 1e3}
    if device.type == "cuda":
        row["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
    if tokens:
        row["tokens_per_second"] = tokens / ms * 1e3
    return row


def sgemm_tflops(device, n=4096, reps=10):
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    for _ in range(3):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n ** 3 * reps / (time.perf_counter() - start) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mlp,convnet,gpt-small,gpt2")
    ap.add_argument("--batch-size", default="mlp=256,convnet=256,gpt-small=8,gpt2=8",
                    help="model=batch pairs")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--device", default="cuda:0", help="cpu rehearses the script without a GPU")
    a = ap.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("pytorch_eager: PyTorch sees no CUDA device", file=sys.stderr)
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    batches = dict(kv.split("=") for kv in a.batch_size.split(","))
    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "none",
            "tf32": False}
    # The GPU's FP32 GEMM rate at 4096^3 (dpe's bench measures the same); a small one on a CPU.
    n = 4096 if device.type == "cuda" else 512
    info[f"sgemm_tflops_{n}"] = sgemm_tflops(device, n)
    print(json.dumps(info), flush=True)
    rows = []
    for name in a.models.split(","):
        try:
            row = run_model(name, int(batches[name]), a, device)
        except Exception as e:  # one model's failure leaves the others' rows
            row = {"model": name, "error": repr(e)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"info": info, "rows": rows}, f, indent=1)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
