"""Writes lowp_golden.safetensors: float32 values and PyTorch's own bfloat16 and float16 of them
(torch.Tensor.to, round to nearest even), for safetensors_test. Run with Debian's python3-torch:
    /usr/bin/python3 tests/engine/io/golden/make_lowp_golden.py
The safetensors layout is written by hand (an 8-byte header length, the JSON header, the data), so
the script needs only torch."""
import json
import struct
import sys

import torch

torch.manual_seed(0)
special = torch.tensor([0.0, -0.0, 1.0, 1 / 3, -2.5, 1e-3, 65504.0, 65520.0, 1e5, 3e38,
                        2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, float("inf"), -float("inf"),
                        1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8])
source = torch.cat([special, torch.randn(239) * 10.0 ** torch.randint(-6, 6, (239,)).float()])
tensors = {
    "source": source,
    "bfloat16": source.to(torch.bfloat16),
    "float16": source.to(torch.float16),
}
codes = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
header, blobs, offset = {}, [], 0
for name, t in tensors.items():
    raw = t.contiguous().view(torch.uint8).numpy().tobytes()
    header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape),
                    "data_offsets": [offset, offset + len(raw)]}
    blobs.append(raw)
    offset += len(raw)
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
out = sys.argv[1] if len(sys.argv) > 1 else "tests/engine/io/golden/lowp_golden.safetensors"
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
print("wrote", out, "with torch", torch.__version__)
