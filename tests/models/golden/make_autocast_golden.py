#!/usr/bin/python3
"""Golden training steps under bfloat16 autocast for tests/models/autocast_golden_test.cc,
computed by PyTorch 1.13 (Debian's python3-torch) on the CPU.

Two models, each trained two SGD steps (lr 0.1, no momentum) with the forward and the loss under
torch.autocast("cpu", dtype=torch.bfloat16), parameters float32:
  mlp: dpe's models/mlp.cc (Flatten, Linear 784-512, ReLU, Linear 512-512, ReLU, Linear 512-10),
       a batch of 8 random 1x28x28 images, cross entropy;
  gpt: make_gpt_golden.py's tiny GPT-2 (its configuration, weights and forward, see gpt_forward
       for the three places written out as dpe computes them), a next-token cross entropy on 2
       random sequences of 12 tokens (11 predictions each).

Each model's file holds its inputs and targets, the initial weights (the GPT's; the Mlp's 669k
weights are not stored but made by mlp_weight() below, which the C++ test repeats bit for bit),
the losses of steps 1 and 2 ("loss"), the gradients of step 1 ("grad1.<name>") and the
parameters after step 2 ("step2.<name>"); tensors of more than 65,536 elements (the Mlp's first
two weights) keep every 16th element of their flattened values (metadata "stride"), so the files
stay small. The metadata also has the dtype of the model's output under autocast
("output_dtype") and the dtypes PyTorch's forward ops computed in ("dtype.<aten op>").

Run from this directory:  /usr/bin/python3 make_autocast_golden.py
"""
import json
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import make_gpt_golden as gpt

LR = 0.1
STRIDE, STRIDE_ABOVE = 16, 65536
MLP_LAYERS = (("layers.1", 784, 512), ("layers.3", 512, 512), ("layers.5", 512, 10))
MLP_BATCH = 8
GPT_B, GPT_T = 2, 11
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32",
               torch.int64: "int64", torch.bool: "bool"}
# The forward ops whose dtypes the C++ test compares with its op trace (autocast's lists,
# promotion, and the ops around them).
TRACED_OPS = ("addmm", "mm", "bmm", "relu", "add", "native_layer_norm", "_softmax",
              "_log_softmax", "nll_loss_forward", "index")


def splitmix64(x):
    """splitmix64's output function on uint64 numpy arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def mlp_weight(index, shape):
    """The index-th Mlp parameter (in state_dict order): element i is a 24-bit integer of
    splitmix64((index << 32) + i) scaled into [-1/32, 1/32), exact in float32 (PyTorch's default
    Linear initialisation is U(-1/sqrt(in), 1/sqrt(in)): 1/28 and 1/22.6 here)."""
    n = int(np.prod(shape))
    x = (np.uint64(index) << np.uint64(32)) + np.arange(n, dtype=np.uint64)
    u = (splitmix64(x) >> np.uint64(40)).astype(np.int64) - (1 << 23)
    return torch.from_numpy((u.astype(np.float64) * 2.0**-28).astype(np.float32)).reshape(shape)


def mlp_params():
    params = {}
    for name, n_in, n_out in MLP_LAYERS:
        params[name + ".weight"] = mlp_weight(len(params), (n_out, n_in))
        params[name + ".bias"] = mlp_weight(len(params), (n_out,))
    return params


def mlp_forward(p, x):
    h = x.flatten(1)
    for i, (name, _, _) in enumerate(MLP_LAYERS):
        h = F.linear(h, p[name + ".weight"], p[name + ".bias"])
        if i + 1 < len(MLP_LAYERS):
            h = F.relu(h)
    return h


def gpt_forward(w, tokens, as_written=False):
    """make_gpt_golden.py's forward with three lines written out as dpe computes them, each a
    place where PyTorch 1.13's CPU kernels round in bfloat16 where dpe's do not:
      - the attention softmax runs in float32, as in dpe's float32 list (CUDA's: PyTorch 1.13's
        CPU list leaves softmax in bfloat16; its bfloat16 softmax rounds once, the same
        probabilities, but its backward then runs in bfloat16);
      - q is scaled by 1/sqrt(hd) before q k^T, as dpe's scaled_dot_product_attention does, in
        float32 and rounded once (PyTorch 1.13 rounds a Python scalar to bfloat16 before
        multiplying a bfloat16 tensor by it: 1/sqrt(8) becomes 0.3535156);
      - the tanh GELU is computed in float32 and rounded once, as dpe's bfloat16 kernel does
        (PyTorch 1.13's bfloat16 tanh GELU rounds each intermediate: 45% of its outputs differ
        from the rounded float32 GELU).
    In float32 these agree with the original to 1e-7; in bfloat16 each rounds differently, by up
    to 2^-9 a value, which moves this tiny model's gradients by ~2%, more than leaving autocast
    off does (main() prints both). as_written: make_gpt_golden.py's forward unchanged."""
    if as_written:
        return gpt.forward(w, tokens)
    b, t = tokens.shape
    hd = gpt.N_EMBD // gpt.N_HEAD
    x = w["wte.weight"][tokens] + w["wpe.weight"][torch.arange(t)]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(gpt.N_LAYER):
        p = f"h.{i}."
        h = F.layer_norm(x, (gpt.N_EMBD,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], gpt.EPS)
        qkv = gpt.conv1d(h, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"])
        q, k, v = (z.view(b, t, gpt.N_HEAD, hd).transpose(1, 2) for z in qkv.split(gpt.N_EMBD, 2))
        q = (q.float() * (1.0 / math.sqrt(hd))).to(q.dtype)
        att = (q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf")).float().softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, gpt.N_EMBD)
        x = x + gpt.conv1d(y, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (gpt.N_EMBD,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], gpt.EPS)
        h = gpt.conv1d(h, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"])
        h = F.gelu(h.float(), approximate="tanh").to(h.dtype)
        x = x + gpt.conv1d(h, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (gpt.N_EMBD,), w["ln_f.weight"], w["ln_f.bias"], gpt.EPS)
    return x @ w["wte.weight"].t()


def gpt_forward_as_written(w, tokens):
    return gpt_forward(w, tokens, as_written=True)


def gpt_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class OpDtypes(TorchDispatchMode):
    """The dtypes of each aten op's first output, by op name."""

    def __init__(self):
        super().__init__()
        self.dtypes = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, (tuple, list)) else out
        if isinstance(first, torch.Tensor):
            name = func.overloadpacket.__name__
            self.dtypes.setdefault(name, set()).add(DTYPE_NAMES.get(first.dtype, str(first.dtype)))
        return out


def train(params, forward, loss_fn, inputs, targets, autocast):
    """Two SGD steps. Returns the output dtype of step 1, the losses, the step-1 gradients, the
    parameters after step 2 and the dtypes of step 1's forward ops."""
    params = {k: v.clone().requires_grad_() for k, v in params.items()}
    opt = torch.optim.SGD(params.values(), lr=LR)
    losses, grads, out_dtype, ops = [], None, None, OpDtypes()
    for step in range(2):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            if step == 0:
                with ops:
                    out = forward(params, inputs)
                    loss = loss_fn(out, targets)
            else:
                out = forward(params, inputs)
                loss = loss_fn(out, targets)
        loss.backward()
        if step == 0:
            out_dtype = out.dtype
            grads = {k: v.grad.detach().clone() for k, v in params.items()}
        losses.append(loss.item())
        opt.step()
    final = {k: v.detach().clone() for k, v in params.items()}
    return out_dtype, losses, grads, final, ops.dtypes


def misses(params, a, b):
    """How far run a is from run b: the worst loss |a - b| / b, the worst gradient and update
    (change of the parameters over both steps) ||a - b|| / ||b||."""
    def rel(x, y):
        return ((x - y).norm() / y.norm()).item()

    loss = max(abs(x - y) / y for x, y in zip(a[1], b[1]))
    grad = max(rel(a[2][k], b[2][k]) for k in b[2])
    update = max(rel(a[3][k] - params[k], b[3][k] - params[k]) for k in b[3])
    return f"loss {loss:.2e}, gradient {grad:.2e}, update {update:.2e}"


def sampled(t):
    t = t.contiguous().reshape(-1)
    return t[::STRIDE].clone() if t.numel() > STRIDE_ABOVE else t


def golden(name, params, forward, loss_fn, inputs, targets, store_params, extra, variants=()):
    run = train(params, forward, loss_fn, inputs, targets, True)
    out_dtype, losses, grads, final, op_dtypes = run
    print(f"{name}: output {out_dtype}, losses {losses[0]:.6f} {losses[1]:.6f}")
    # For comparison only: what the C++ test's tolerances must be tighter than.
    print("  float32 against it:", misses(params, train(params, forward, loss_fn, inputs,
                                                         targets, False), run))
    for label, f in variants:
        print(f"  {label} against it:",
              misses(params, train(params, f, loss_fn, inputs, targets, True), run))
    out = {"input": inputs, "target": targets, "loss": torch.tensor(losses, dtype=torch.float32)}
    if store_params:
        out.update({k: v for k, v in params.items()})
    out.update({"grad1." + k: sampled(v) for k, v in grads.items()})
    out.update({"step2." + k: sampled(v) for k, v in final.items()})
    metadata = {"torch": torch.__version__, "output_dtype": DTYPE_NAMES[out_dtype],
                "lr": str(LR), "stride": str(STRIDE), "stride_above": str(STRIDE_ABOVE)}
    for op in TRACED_OPS:
        if op in op_dtypes:
            metadata["dtype." + op] = ",".join(sorted(op_dtypes[op]))
    metadata.update(extra)
    path = f"autocast_{name}.safetensors"
    gpt.save_safetensors(path, out, metadata)
    print("  wrote", path)


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1913)
    images = torch.rand(MLP_BATCH, 1, 28, 28, generator=gen)
    labels = torch.randint(0, 10, (MLP_BATCH,), generator=gen)
    golden("mlp", mlp_params(), mlp_forward, F.cross_entropy, images, labels, False, {})

    gen = torch.Generator().manual_seed(2019)  # make_gpt_golden.py's weights
    weights = gpt.make_weights(gen)
    seq = torch.randint(0, gpt.VOCAB, (GPT_B, GPT_T + 1), generator=gen)
    config = {"n_layer": gpt.N_LAYER, "n_head": gpt.N_HEAD, "n_embd": gpt.N_EMBD,
              "n_ctx": gpt.N_CTX, "vocab": gpt.VOCAB}
    golden("gpt", weights, gpt_forward, gpt_loss, seq[:, :-1].contiguous(),
           seq[:, 1:].contiguous(), True, {"config": json.dumps(config)},
           [("make_gpt_golden.py's forward as written", gpt_forward_as_written)])


if __name__ == "__main__":
    main()
