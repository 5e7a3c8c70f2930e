#!/usr/bin/python3
"""Golden training steps under bfloat16 autocast for tests/models/autocast_golden_test.cc,
computed by PyTorch 1.13 (Debian's python3-torch) on the CPU.

Three models, each trained two SGD steps (no momentum; lr 0.1, the ConvNet's 0.01) with the
forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16), parameters float32:
  mlp: dpe's models/mlp.cc (Flatten, Linear 784-512, ReLU, Linear 512-512, ReLU, Linear 512-10),
       a batch of 8 random 1x28x28 images, cross entropy;
  gpt: make_gpt_golden.py's tiny GPT-2 (its configuration, weights and forward, see gpt_forward
       for the three places written out as dpe computes them), a next-token cross entropy on 2
       random sequences of 12 tokens (11 predictions each);
  convnet: dpe's models/convnet.cc (layer1: Conv 1-16 5x5 pad 2, BatchNorm2d, ReLU, MaxPool 2;
       layer2: the same 16-32; fc: Linear 1568-10), batch norm in training (batch statistics,
       running ones updated, momentum 0.1, eps 1e-5), a batch of 4 random 1x28x28 images, cross
       entropy. PyTorch runs batch norm, ReLU and pooling in bfloat16 on the convolutions'
       bfloat16 outputs; dpe reads them in float32 and writes float32 (docs/differences.md).
       Its file holds a second run, "dpe_rounding.<key>": convnet_forward(dpe_rounding=True),
       dpe's arithmetic written in PyTorch (see convnet_forward and the C++ test for why).

Each model's file holds its inputs and targets, the initial weights (the GPT's; the Mlp's 669k
and the ConvNet's 29k weights are not stored but made by splitmix_uniform() below, which the C++
test repeats bit for bit), the losses of steps 1 and 2 ("loss"), the gradients of step 1
("grad1.<name>") and the parameters (and the ConvNet's running statistics) after step 2
("step2.<name>"); tensors of more than 65,536 elements (the Mlp's first two weights) keep every
16th element of their flattened values (metadata "stride"), so the files stay small. The
metadata also has the dtype of the model's output under autocast ("output_dtype") and the
dtypes PyTorch's forward ops computed in ("dtype.<aten op>", for the ops of TRACED_OPS or
CONVNET_TRACED_OPS).

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
CONVNET_BATCH = 4
CONVNET_LR = 0.01  # at 0.1 the second loss is three times the first
BN_EPS, BN_MOMENTUM = 1e-5, 0.1
# Tensors of the parameter dicts that are not parameters: batch norm's running statistics, which
# train() updates through the forward and does not step.
BUFFERS = ("running_mean", "running_var")
# The ConvNet's convolution biases: batch norm takes the mean out right after them, so their
# gradients are zero but for rounding, and misses() measures theirs against the norm of their
# layer weight's instead.
NORM_OF = {"layer1.0.bias": "layer1.0.weight", "layer2.0.bias": "layer2.0.weight"}
GPT_B, GPT_T = 2, 11
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32",
               torch.int64: "int64", torch.bool: "bool"}
# The forward ops whose dtypes the C++ test compares with its op trace (autocast's lists,
# promotion, and the ops around them).
TRACED_OPS = ("addmm", "mm", "bmm", "relu", "add", "native_layer_norm", "_softmax",
              "_log_softmax", "nll_loss_forward", "index")
# The ConvNet's: its ReLUs, batch norms and poolings are where PyTorch computes in bfloat16 and
# dpe in float32, which the C++ test checks as such.
CONVNET_TRACED_OPS = ("convolution", "native_batch_norm", "relu", "max_pool2d_with_indices",
                      "addmm", "_log_softmax", "nll_loss_forward")


def splitmix64(x):
    """splitmix64's output function on uint64 numpy arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def splitmix_uniform(index, shape, bound, centre=0.0):
    """The index-th parameter of a model (in state_dict order, buffers not counted): element i
    is centre + bound * u / 2^23, u the top 24 bits of splitmix64((index << 32) + i) centred
    (uniform on [centre - bound, centre + bound)), in float64 and rounded once to float32 (the
    C++ test repeats it bit for bit: u / 2^23 is exact, the product one rounding, and the sum
    exact where centre is nonzero, bound being a power of two there)."""
    n = int(np.prod(shape))
    x = (np.uint64(index) << np.uint64(32)) + np.arange(n, dtype=np.uint64)
    u = (splitmix64(x) >> np.uint64(40)).astype(np.int64) - (1 << 23)
    v = centre + u.astype(np.float64) * 2.0**-23 * bound
    return torch.from_numpy(v.astype(np.float32)).reshape(shape)


def mlp_weight(index, shape):
    """The index-th Mlp parameter: in [-1/32, 1/32), exact in float32 (PyTorch's default Linear
    initialisation is U(-1/sqrt(in), 1/sqrt(in)): 1/28 and 1/22.6 here)."""
    return splitmix_uniform(index, shape, 2.0**-5)


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


def is_buffer(name):
    return name.rsplit(".", 1)[-1] in BUFFERS


def convnet_params():
    """Conv2d and Linear as PyTorch initialises them, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
    weights and biases; batch norm's weight and bias in [7/8, 9/8) and [-1/8, 1/8), so that
    both enter the steps; running statistics as new (0 and 1). The 29k parameters are not
    stored but made by splitmix_uniform; state_dict names and order."""
    params = {}
    for block, c_in, c_out in (("layer1", 1, 16), ("layer2", 16, 32)):
        bound = 1 / math.sqrt(c_in * 5 * 5)
        params[block + ".0.weight"] = splitmix_uniform(len(params), (c_out, c_in, 5, 5), bound)
        params[block + ".0.bias"] = splitmix_uniform(len(params), (c_out,), bound)
        params[block + ".1.weight"] = splitmix_uniform(len(params), (c_out,), 2.0**-3, 1.0)
        params[block + ".1.bias"] = splitmix_uniform(len(params), (c_out,), 2.0**-3)
    bound = 1 / math.sqrt(7 * 7 * 32)
    params["fc.weight"] = splitmix_uniform(len(params), (10, 7 * 7 * 32), bound)
    params["fc.bias"] = splitmix_uniform(len(params), (10,), bound)
    for block, c in (("layer1", 16), ("layer2", 32)):
        params[block + ".1.running_mean"] = torch.zeros(c)
        params[block + ".1.running_var"] = torch.ones(c)
    return params


def convnet_forward(p, x, dpe_rounding=False, bf16_maxima=False):
    """The ConvNet in training. dpe_rounding: batch norm (with the ReLU and the pooling after
    it) reads the convolution's bfloat16 output in float32 and writes float32, as dpe under
    autocast; the next product rounds to bfloat16 again. The values reaching the products are
    then PyTorch's (ReLU and max commute with rounding) up to the order of the float32 sums in
    the batch statistics. In the backward both round batch norm's input gradient to bfloat16
    (PyTorch's bfloat16 batch norm computes in float32; dpe rounds at the cast back to the
    convolution's output dtype); what differs is the pooling's choice where two values of a
    window tie once rounded: PyTorch passes the gradient to the first, dpe to the larger
    float32 one. bf16_maxima (with dpe_rounding): the pooling takes PyTorch's choices, from the
    rounded values, which main() shows leaves nothing else to explain."""
    h = x
    for block in ("layer1", "layer2"):
        h = F.conv2d(h, p[block + ".0.weight"], p[block + ".0.bias"], padding=2)
        widened = dpe_rounding and h.dtype == torch.bfloat16
        if widened:
            h = h.float()
        h = F.relu(F.batch_norm(h, p[block + ".1.running_mean"], p[block + ".1.running_var"],
                                p[block + ".1.weight"], p[block + ".1.bias"], True, BN_MOMENTUM,
                                BN_EPS))
        if bf16_maxima and widened:
            _, index = F.max_pool2d(h.detach().bfloat16(), 2, return_indices=True)
            h = h.flatten(2).gather(2, index.flatten(2)).view(index.shape)
        else:
            h = F.max_pool2d(h, 2)
    return F.linear(h.flatten(1), p["fc.weight"], p["fc.bias"])


def convnet_forward_dpe_rounding(p, x):
    return convnet_forward(p, x, dpe_rounding=True)


def convnet_forward_dpe_rounding_bf16_maxima(p, x):
    return convnet_forward(p, x, dpe_rounding=True, bf16_maxima=True)


def convnet_pooling_ties(p, x):
    """What differs between convnet_forward's two roundings, block by block at the initial
    weights, on PyTorch's own forward: how many pooling windows pick another maximum in
    bfloat16 than in float32 (two values that tie once rounded: PyTorch takes the first), and
    how far batch norm's input gradient is from PyTorch's when computed in float32 from the
    same bfloat16 input and the same upstream gradient, routed through PyTorch's maxima."""
    gen = torch.Generator().manual_seed(7)
    lines = []
    h = x
    for block in ("layer1", "layer2"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = F.conv2d(h, p[block + ".0.weight"], p[block + ".0.bias"], padding=2).detach()
        grads, picks = [], []
        for widen in (False, True):
            yy = y.clone().requires_grad_()
            g, b = (p[block + ".1." + k].clone().requires_grad_() for k in ("weight", "bias"))
            z = F.batch_norm(yy.float() if widen else yy, p[block + ".1.running_mean"].clone(),
                             p[block + ".1.running_var"].clone(), g, b, True, BN_MOMENTUM,
                             BN_EPS)
            r = F.relu(z)
            pooled, index = F.max_pool2d(r, 2, return_indices=True)
            picks.append(index)
            if not widen:
                upstream = torch.randn(pooled.shape, generator=gen).bfloat16()
                out, index_used = pooled, index
            else:  # PyTorch's maxima
                out = r.flatten(2).gather(2, index_used.flatten(2)).view_as(pooled)
            out.backward(upstream.to(out.dtype))
            grads.append(yy.grad.float())
        ties = (picks[0] != picks[1]).sum().item()
        diff = ((grads[1] - grads[0]).norm() / grads[0].norm()).item()
        lines.append(f"{block}: {ties} of {picks[0].numel()} windows tie once rounded, batch "
                     f"norm's input gradient with PyTorch's maxima {diff:.1e} from PyTorch's")
        h = out.detach().bfloat16()
    return lines


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


def train(params, forward, loss_fn, inputs, targets, autocast, lr=LR):
    """Two SGD steps. Returns the output dtype of step 1, the losses, the step-1 gradients, the
    parameters (and buffers) after step 2 and the dtypes of step 1's forward ops."""
    params = {k: v.clone().requires_grad_(not is_buffer(k)) for k, v in params.items()}
    opt = torch.optim.SGD([v for k, v in params.items() if not is_buffer(k)], lr=lr)
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
            grads = {k: v.grad.detach().clone() for k, v in params.items() if not is_buffer(k)}
        losses.append(loss.item())
        opt.step()
    final = {k: v.detach().clone() for k, v in params.items()}
    return out_dtype, losses, grads, final, ops.dtypes


def misses(params, a, b):
    """How far run a is from run b: the worst loss |a - b| / b, the worst gradient and update
    (change of the parameters, and of the running statistics, over both steps)
    ||a - b|| / ||b||, each with its tensor; b's norm is that of NORM_OF's tensor where named."""
    def worst(x, y):
        return max((((x[k] - y[k]).norm() / y[NORM_OF.get(k, k)].norm()).item(), k) for k in y)

    loss = max(abs(x - y) / y for x, y in zip(a[1], b[1]))
    grad = worst(a[2], b[2])
    update = worst(*({k: v[k] - params[k] for k in v} for v in (a[3], b[3])))
    return (f"loss {loss:.2e}, gradient {grad[0]:.2e} ({grad[1]}), "
            f"update {update[0]:.2e} ({update[1]})")


def sampled(t):
    t = t.contiguous().reshape(-1)
    return t[::STRIDE].clone() if t.numel() > STRIDE_ABOVE else t


def steps(run, prefix=""):
    """A run's losses, step-1 gradients and step-2 parameters as the golden file keeps them."""
    _, losses, grads, final, _ = run
    out = {prefix + "loss": torch.tensor(losses, dtype=torch.float32)}
    out.update({prefix + "grad1." + k: sampled(v) for k, v in grads.items()})
    out.update({prefix + "step2." + k: sampled(v) for k, v in final.items()})
    return out


def golden(name, params, forward, loss_fn, inputs, targets, store_params, extra, variants=(),
           traced=TRACED_OPS, lr=LR):
    """variants: (label, forward, prefix): printed against the golden run, and stored under
    prefix where it is not None."""
    run = train(params, forward, loss_fn, inputs, targets, True, lr)
    out_dtype, losses, _, _, op_dtypes = run
    print(f"{name}: output {out_dtype}, losses {losses[0]:.6f} {losses[1]:.6f}")
    # For comparison only: what the C++ test's tolerances must be tighter than.
    f32 = train(params, forward, loss_fn, inputs, targets, False, lr)
    print("  float32 against it:", misses(params, f32, run))
    out = {"input": inputs, "target": targets, "loss": None}
    if store_params:
        out.update({k: v for k, v in params.items()})
    out.update(steps(run))
    for label, f, prefix in variants:
        other = train(params, f, loss_fn, inputs, targets, True, lr)
        print(f"  {label} against it:", misses(params, other, run))
        if prefix is not None:
            print("  float32 against the latter:", misses(params, f32, other))
            out.update(steps(other, prefix))
    metadata = {"torch": torch.__version__, "output_dtype": DTYPE_NAMES[out_dtype],
                "lr": str(lr), "stride": str(STRIDE), "stride_above": str(STRIDE_ABOVE)}
    for op in traced:
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
           [("make_gpt_golden.py's forward as written", gpt_forward_as_written, None)])

    gen = torch.Generator().manual_seed(2003)
    images = torch.rand(CONVNET_BATCH, 1, 28, 28, generator=gen)
    labels = torch.randint(0, 10, (CONVNET_BATCH,), generator=gen)
    for line in convnet_pooling_ties(convnet_params(), images):
        print("  at the initial weights,", line)
    golden("convnet", convnet_params(), convnet_forward, F.cross_entropy, images, labels, False,
           {"bn_eps": str(BN_EPS), "bn_momentum": str(BN_MOMENTUM)},
           [("dpe's rounding (batch norm, ReLU, pooling in float32)",
             convnet_forward_dpe_rounding, "dpe_rounding."),
            ("the same with PyTorch's maxima", convnet_forward_dpe_rounding_bf16_maxima, None)],
           CONVNET_TRACED_OPS, CONVNET_LR)


if __name__ == "__main__":
    main()
