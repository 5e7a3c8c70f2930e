#!/usr/bin/python3
"""PyTorch 1.13's training throughput on dpe's gpt-small, for the side-by-side in docs/performance.md.

The same architecture as models/gpt.cc (GPT-2: pre-LayerNorm blocks, causal attention as two
batched matmuls and a masked softmax, GELU tanh, tied head; Conv1D weights [in, out]), trained
with AdamW (PyTorch defaults) on random tokens, one thread unless --threads says otherwise.
Prints tokens per second as the median of the timed steps.

With --dpe-bench, it measures dpe's //tools:bench (single device, one thread) on the same
configuration in the same run, alternating the two for --rounds rounds so that both see the same
machine, and prints the medians and their ratio:

  tools/bazelw build //tools:bench
  /usr/bin/python3 tools/pytorch/gpt_speed.py --dpe-bench bazel-bin/tools/bench --rounds 3

Debian's python3-torch is built against the generic BLAS interface: without an optimized BLAS it
multiplies with the reference libblas (about 6 GFLOP/s here). Install libopenblas0-pthread first
(`apt-get install libopenblas0-pthread`: PyTorch then runs its matmuls at about 84 GFLOP/s on one
thread); the script refuses to compare against the reference BLAS.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before torch loads OpenBLAS
import torch  # noqa: E402
import torch.nn as nn
import torch.nn.functional as F


class Conv1D(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(
            *x.shape[:-1], self.weight.shape[1])


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.attn_proj = Conv1D(d, 3 * d), Conv1D(d, d)
        self.c_fc, self.mlp_proj = Conv1D(d, 4 * d), Conv1D(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, 2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.h)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.attn_proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, n_layer, n_head, d, ctx, vocab):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.h = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        # GPT-2's (and dpe's) initialisation: N(0, 0.02) embeddings. PyTorch's default N(0, 1)
        # embedding, tied to the output, gives logits of +-50, a loss near 46 and denormal
        # gradients, which make an Intel CPU about 10x slower: not a fair comparison.
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def pytorch_tokens_per_second(a):
    torch.manual_seed(0)
    model = Gpt(4, 4, 256, 128, 32000)
    opt = torch.optim.AdamW(model.parameters())
    times = []
    for step in range(a.warmup + a.steps):
        tok = torch.randint(0, 32000, (a.batch, a.context + 1))
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = model(tok[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 32000), tok[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    return a.batch * a.context / statistics.median(times)


def dpe_tokens_per_second(a):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        subprocess.run([a.dpe_bench, "--models", "gpt-small", "--devices", "1", "--batch-size",
                        str(a.batch), "--context", str(a.context), "--warmup", str(a.warmup),
                        "--steps", str(a.steps), "--precision", a.precision, "--json", out,
                        "--svg",
                        os.path.join(tmp, "bench.svg")], check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            rows = json.load(f)
    rows = rows["results"] if isinstance(rows, dict) else rows
    return next(r["tokens_per_second"] for r in rows if r["mode"] == "single")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", "--batch", dest="batch", type=int, default=8,
                    help="sequences per step (one device: the global batch)")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: both under autocast(bfloat16), PyTorch's torch.autocast('cpu')")
    ap.add_argument("--dpe-bench", help="path of //tools:bench: measure dpe alongside")
    ap.add_argument("--rounds", type=int, default=3, help="with --dpe-bench: alternations")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    x = torch.randn(512, 512)
    start = time.perf_counter()
    for _ in range(4):
        x @ x
    blas = 4 * 2 * 512 ** 3 / (time.perf_counter() - start) / 1e9
    print(f"pytorch matmul 512^3 on {a.threads} thread(s): {blas:.1f} GFLOP/s")
    if blas < 20:
        ap.error(f"PyTorch multiplies at {blas:.1f} GFLOP/s: the reference BLAS; "
                 "install libopenblas0-pthread for a fair comparison")
    config = (f"gpt-small batch {a.batch} context {a.context} threads {a.threads} "
              f"{a.precision}")
    if not a.dpe_bench:
        print(f"pytorch {torch.__version__} {config}: "
              f"{pytorch_tokens_per_second(a):.0f} tokens/s")
        return
    if a.threads != 1:
        ap.error("--dpe-bench compares one thread against one thread (dpe's bench uses one)")
    pt, dp = [], []
    for r in range(a.rounds):
        pt.append(pytorch_tokens_per_second(a))
        dp.append(dpe_tokens_per_second(a))
        print(f"round {r + 1}: pytorch {pt[-1]:.0f} tokens/s, dpe {dp[-1]:.0f} tokens/s", flush=True)
    p, d = statistics.median(pt), statistics.median(dp)
    print(f"{config}, {a.steps} steps after {a.warmup} warm-up, medians of {a.rounds} rounds: "
          f"pytorch {torch.__version__} {p:.0f} tokens/s, dpe {d:.0f} tokens/s, dpe/pytorch {d / p:.2f}x")


if __name__ == "__main__":
    main()
