#!/usr/bin/python3
"""Golden state_dict keys for tests/models/resnet_test.cc, from torchvision 0.14.1 (Debian's
python3-torchvision, on PyTorch 1.13): torchvision.models.resnet50().state_dict(), one entry a
line in its order, "name dim0 dim1 ..." (no dims for a scalar such as num_batches_tracked).

Run from this directory:  /usr/bin/python3 resnet50_keys.py > resnet50_state_dict_keys.txt
"""
import torchvision

model = torchvision.models.resnet50()  # weights=None: only the architecture is read
for name, t in model.state_dict().items():
    print(" ".join([name] + [str(d) for d in t.shape]))
