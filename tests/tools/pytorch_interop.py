#!/usr/bin/python3
"""PyTorch's side of tests/tools/pytorch_interop_test.cc, for PyTorch 1.13
(Debian's python3-torch; Debian has no python3-safetensors, so the safetensors format is read and
written here with json + struct: 8-byte little-endian header length, JSON header, raw data).

The seeds' Fashion-MNIST models are defined under the names dpe gives them (models/mlp.cc,
models/convnet.cc). Both directions of the interop, on the images in --inputs (written by the C++
test, already normalized):
  dpe -> PyTorch: --dpe-model (dpe train's DIR/model.safetensors) is loaded with
    load_state_dict(strict=True); its eval-mode logits go to OUT/torch_logits_of_dpe.safetensors.
  PyTorch -> dpe: a PyTorch model (seed 1) takes 3 SGD steps on the inputs in train mode (so that
    BatchNorm's running statistics and num_batches_tracked move), then its state_dict goes to
    OUT/torch_model.safetensors and its eval-mode logits to OUT/torch_logits.safetensors.
The C++ test compares the logits and reports the largest absolute difference.

Run by hand:  /usr/bin/python3 pytorch_interop.py --model convnet --dpe-model DIR/model.safetensors
                  --inputs inputs.safetensors --out OUT
"""
import argparse
import json
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "I64": torch.int64}
CODES = {v: k for k, v in DTYPES.items()}


def load_safetensors(path):
    """{name: tensor} of a safetensors file (F32 and I64, the dtypes dpe writes)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        flat = (torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=dtype)
                if end > begin else torch.empty(0, dtype=dtype))
        out[name] = flat.reshape(info["shape"]).clone()
    return out


def save_safetensors(path, tensors):
    """Writes {name: tensor} as safetensors.torch.save_file does (metadata format pt)."""
    header = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        blob = t.numpy().tobytes()
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


class Mlp(nn.Module):
    """models/mlp.cc: layers = Flatten, Linear(784, 512), ReLU, Linear(512, 512), ReLU,
    Linear(512, 10)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
                                    nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x):
        return self.layers(x)


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 5, stride=1, padding=2), nn.BatchNorm2d(cout),
                         nn.ReLU(), nn.MaxPool2d(2))


class ConvNet(nn.Module):
    """models/convnet.cc (the seeds' ConvNet): layer1, layer2 = Conv2d 5x5 pad 2, BatchNorm2d,
    ReLU, MaxPool2d(2); fc = Linear(7 * 7 * 32, 10)."""

    def __init__(self):
        super().__init__()
        self.layer1 = block(1, 16)
        self.layer2 = block(16, 32)
        self.fc = nn.Linear(7 * 7 * 32, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.layer2(self.layer1(x)), 1))


MODELS = {"mlp": Mlp, "convnet": ConvNet}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), required=True)
    p.add_argument("--dpe-model", required=True, help="dpe train's DIR/model.safetensors")
    p.add_argument("--inputs", required=True, help="safetensors with 'input' and 'target'")
    p.add_argument("--out", required=True, help="folder for the outputs")
    a = p.parse_args()
    torch.set_num_threads(1)
    io = load_safetensors(a.inputs)
    x, y = io["input"], io["target"]

    # dpe -> PyTorch: strict, so every key and shape must be PyTorch's.
    model = MODELS[a.model]()
    result = model.load_state_dict(load_safetensors(a.dpe_model), strict=True)
    model.eval()
    with torch.no_grad():
        logits = model(x)
    save_safetensors(f"{a.out}/torch_logits_of_dpe.safetensors", {"logits": logits})
    print(f"{a.model}: dpe's model.safetensors loaded strict ({result}); PyTorch's accuracy on "
          f"{len(y)} test images {(logits.argmax(1) == y).float().mean().item():.4f}")

    # PyTorch -> dpe.
    torch.manual_seed(1)
    theirs = MODELS[a.model]()
    opt = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    theirs.train()
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(theirs(x), y).backward()
        opt.step()
    theirs.eval()
    with torch.no_grad():
        their_logits = theirs(x)
    save_safetensors(f"{a.out}/torch_model.safetensors", theirs.state_dict())
    save_safetensors(f"{a.out}/torch_logits.safetensors", {"logits": their_logits})
    print(f"{a.model}: PyTorch's state_dict ({len(theirs.state_dict())} tensors) written")


if __name__ == "__main__":
    main()
