#!/usr/bin/python3
"""Golden forward and backward for tests/models/resnet_test.cc, computed by torchvision 0.14.1 on
PyTorch 1.13 (Debian's python3-torchvision and python3-torch).

resnet50's architecture at a base width of 4 (torchvision hard-codes 64), layers [2, 1, 1, 1], 5
classes: torchvision's own ResNet, Bottleneck, _make_layer and _forward_impl, only __init__
re-done with the width as a parameter (checked to give resnet50's exact state_dict at width 64).
Random BatchNorm weights, biases and statistics (convs and fc as PyTorch initialises them); writes them under torchvision's names, the input, the
eval-mode logits, then the train-mode logits, the cross-entropy loss, every parameter's gradient
("grad.<name>") and the buffers after that training forward ("after.<name>") into one
safetensors file, so the C++ test needs no PyTorch.

Run from this directory:  /usr/bin/python3 resnet50_tiny_golden.py
"""
import json
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import Bottleneck, ResNet

LAYERS, WIDTH, CLASSES = [2, 1, 1, 1], 4, 5
N, H, W = 3, 36, 44  # non-square, and not a multiple of 32: every padding path is exercised


class WidthResNet(ResNet):
    def __init__(self, layers, width, num_classes):
        nn.Module.__init__(self)
        self._norm_layer = nn.BatchNorm2d
        self.inplanes, self.dilation, self.groups, self.base_width = width, 1, 1, 64
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(Bottleneck, width, layers[0])
        self.layer2 = self._make_layer(Bottleneck, 2 * width, layers[1], stride=2)
        self.layer3 = self._make_layer(Bottleneck, 4 * width, layers[2], stride=2)
        self.layer4 = self._make_layer(Bottleneck, 8 * width, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * width * Bottleneck.expansion, num_classes)


def save_safetensors(path, tensors, metadata):
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
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
    full = WidthResNet([3, 4, 6, 3], 64, 1000).state_dict()
    ref = torchvision.models.resnet50().state_dict()
    assert [(k, v.shape) for k, v in full.items()] == [(k, v.shape) for k, v in ref.items()]

    torch.manual_seed(50)
    model = WidthResNet(LAYERS, WIDTH, CLASSES)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                t.fill_(3)
            elif name.endswith("running_var"):
                t.uniform_(0.5, 2.0)
            elif name.endswith("running_mean") or name.endswith("bias"):
                t.normal_(0.0, 0.2)
            elif "bn" in name or "downsample.1" in name:  # BatchNorm's weight
                t.uniform_(0.5, 1.5)
            # conv and fc weights keep PyTorch's default initialisation: the activations stay O(1)
    out = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(N, 3, H, W)
    target = torch.randint(0, CLASSES, (N,))
    model.eval()
    with torch.no_grad():
        out["golden.eval_logits"] = model(x)
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    out["golden.input"] = x
    out["golden.target"] = target
    out["golden.train_logits"] = logits
    out["golden.loss"] = loss.reshape(1)
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad
    for name, b in model.named_buffers():
        out["after." + name] = b
    config = {"layers": LAYERS, "width": WIDTH, "num_classes": CLASSES, "input": [N, 3, H, W]}
    save_safetensors("resnet50_tiny_golden.safetensors", out,
                     {"config": json.dumps(config), "torch": torch.__version__,
                      "torchvision": torchvision.__version__})
    n = sum(p.numel() for p in model.parameters())
    print("wrote resnet50_tiny_golden.safetensors:", n, "parameters, loss", loss.item())


if __name__ == "__main__":
    main()
