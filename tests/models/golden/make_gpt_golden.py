#!/usr/bin/python3
"""Golden logits for tests/models/gpt_test.cc, computed by PyTorch 1.13 (Debian's python3-torch).

GPT-2's forward written in plain torch exactly as HuggingFace's GPT2LMHeadModel computes it
(Conv1D = addmm with weight [in, out], pre-LayerNorm blocks, causal attention scaled by
1/sqrt(head_dim), GELU tanh form, final LayerNorm, LM head tied to wte), on a tiny random
configuration. Writes weights under GPT-2's parameter names, the tokens and the logits into one
safetensors file, so the C++ test needs no PyTorch.

Run from this directory:  /usr/bin/python3 make_gpt_golden.py
"""
import json
import math
import struct

import torch
import torch.nn.functional as F

N_LAYER, N_HEAD, N_EMBD, N_CTX, VOCAB = 2, 4, 32, 16, 97
B, T = 2, 11
EPS = 1e-5


def make_weights(gen):
    def rnd(*shape, std=0.1, mean=0.0):
        return torch.randn(*shape, generator=gen) * std + mean

    w = {"wte.weight": rnd(VOCAB, N_EMBD, std=0.3), "wpe.weight": rnd(N_CTX, N_EMBD, std=0.3)}
    for i in range(N_LAYER):
        p = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            w[p + ln + ".weight"] = rnd(N_EMBD, mean=1.0)
            w[p + ln + ".bias"] = rnd(N_EMBD)
        for name, n_in, n_out in (("attn.c_attn", N_EMBD, 3 * N_EMBD),
                                  ("attn.c_proj", N_EMBD, N_EMBD),
                                  ("mlp.c_fc", N_EMBD, 4 * N_EMBD),
                                  ("mlp.c_proj", 4 * N_EMBD, N_EMBD)):
            w[p + name + ".weight"] = rnd(n_in, n_out, std=1 / math.sqrt(n_in))
            w[p + name + ".bias"] = rnd(n_out)
    w["ln_f.weight"] = rnd(N_EMBD, mean=1.0)
    w["ln_f.bias"] = rnd(N_EMBD)
    return w


def conv1d(x, w, b):
    return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[1])


def forward(w, tokens):
    b, t = tokens.shape
    hd = N_EMBD // N_HEAD
    x = w["wte.weight"][tokens] + w["wpe.weight"][torch.arange(t)]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(N_LAYER):
        p = f"h.{i}."
        h = F.layer_norm(x, (N_EMBD,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], EPS)
        q, k, v = conv1d(h, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"]).split(N_EMBD, 2)
        q, k, v = (z.view(b, t, N_HEAD, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, N_EMBD)
        x = x + conv1d(y, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (N_EMBD,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], EPS)
        h = F.gelu(conv1d(h, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + conv1d(h, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (N_EMBD,), w["ln_f.weight"], w["ln_f.bias"], EPS)
    return x @ w["wte.weight"].t()


def save_safetensors(path, tensors, metadata):
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        data = t.numpy().tobytes()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def main():
    gen = torch.Generator().manual_seed(2019)
    w = make_weights(gen)
    tokens = torch.randint(0, VOCAB, (B, T), generator=gen)
    with torch.no_grad():
        logits = forward(w, tokens)
    out = dict(w)
    out["golden.tokens"] = tokens
    out["golden.logits"] = logits
    config = {"n_layer": N_LAYER, "n_head": N_HEAD, "n_embd": N_EMBD, "n_ctx": N_CTX, "vocab": VOCAB}
    save_safetensors("gpt_tiny.safetensors", out,
                     {"config": json.dumps(config), "torch": torch.__version__})
    print("wrote gpt_tiny.safetensors: logits", tuple(logits.shape), "torch", torch.__version__)


if __name__ == "__main__":
    main()
