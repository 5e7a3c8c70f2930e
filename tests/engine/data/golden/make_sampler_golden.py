#!/usr/bin/python3
"""Writes sampler_golden.json: PyTorch 1.13's CPU generator, randperm, DistributedSampler and
RandomSampler (also through DataLoader) outputs, for torch_generator_test and the sampler tests (CI has no PyTorch).

Run with Debian's python3-torch 1.13 (apt-get install -y python3-torch):
    /usr/bin/python3 tests/engine/data/golden/make_sampler_golden.py
It takes about a minute, most of it the one large randperm (n = 214748364, 1.7 GB).

Long lists are stored as {"len", "head", "tail", "checksum"}: the first and last 8 entries and
sum((v + 1) * (i * 0x9E3779B97F4A7C15 + 1)) mod 2^64 over positions i (checksum() below; the C++
test computes the same). Short lists are stored whole.
"""
import json
import os
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "sampler_golden.json")
FULL_MAX = 128  # lists up to this length are stored whole
MASK64 = (1 << 64) - 1


def checksum(values):
    v = np.asarray(values, dtype=np.int64).astype(np.uint64)
    total = 0
    step = 1 << 22
    with np.errstate(over="ignore"):
        for start in range(0, len(v), step):
            i = np.arange(start, min(start + step, len(v)), dtype=np.uint64)
            w = i * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1)
            total = (total + int(((v[start:start + len(i)] + np.uint64(1)) * w).sum())) & MASK64
    return total


def summarise(values):
    """A whole list, or its length, ends and checksum when it is long."""
    if len(values) <= FULL_MAX:
        return [int(x) for x in values]
    return {
        "len": len(values),
        "head": [int(x) for x in values[:8]],
        "tail": [int(x) for x in values[-8:]],
        "checksum": checksum(values),
    }


def generator_cases():
    # random_(-2**63, None) fills an int64 tensor with the full 64 bits of random64() each.
    # Draws 0-15 and 304-319: 32-bit output 624 (random64 number 312) is the first after a refill.
    out = []
    for seed in [0, 1, 7, 42, 2**31 - 1, 2**32 - 1, 2**32 + 7, 67280421310721, 2**64 - 1]:
        g = torch.Generator()
        g.manual_seed(seed)
        draws = torch.empty(320, dtype=torch.int64).random_(-2**63, None, generator=g).tolist()
        draws = [d & MASK64 for d in draws]
        out.append({"seed": seed, "random64_0": draws[:16], "random64_304": draws[304:320]})
    return out


def randperm_cases():
    out = []
    small = [0, 1, 2, 3, 4, 5, 8, 10, 16, 17, 31, 32, 33, 100, 127, 128, 129, 1000]
    cases = [(n, s) for n in small for s in [0, 1, 42, 2**32 + 1]]
    cases += [(n, s) for n in [4096, 10000, 60000, 65537, 1 << 20] for s in [0, 3]]
    # Later PyTorch releases change the algorithm from n = uint32 max / 20 on; 1.13 does not.
    cases += [(214748364, 0)]
    for n, seed in cases:
        g = torch.Generator()
        g.manual_seed(seed)
        perm = torch.randperm(n, generator=g)
        values = perm.numpy() if n > FULL_MAX else perm.tolist()
        case = {"n": n, "seed": seed, "perm": summarise(values)}
        if n >= 10**8:
            case["large"] = True
        out.append(case)
        print(f"randperm n={n} seed={seed}", file=sys.stderr)
    return out


def distributed_sampler_cases():
    out = []
    small = [0, 1, 2, 3, 4, 5, 7, 8, 10, 11, 13, 17, 64, 100, 101, 127]
    seed_epochs = [(0, 0), (0, 1), (0, 5), (1, 0), (42, 3), (2**32 + 41, 4)]
    big = [(n, se) for n in [1000, 60000, 60001] for se in [(0, 0), (0, 2), (42, 1)]]
    cases = [(n, se) for n in small for se in seed_epochs] + big
    for n, (seed, epoch) in cases:
        for replicas in [1, 2, 3, 4]:
            for drop_last in [False, True]:
                ranks = []
                for rank in range(replicas):
                    s = DistributedSampler(range(n), num_replicas=replicas, rank=rank,
                                           shuffle=True, seed=seed, drop_last=drop_last)
                    s.set_epoch(epoch)
                    ranks.append(summarise(list(iter(s))))
                out.append({"n": n, "replicas": replicas, "drop_last": drop_last, "seed": seed,
                            "epoch": epoch, "ranks": ranks})
    return out


def random_sampler_cases():
    # Pass e of one RandomSampler over a generator seeded once, each pass iterated to its end (as
    # a DataLoader loop does): dpe's RandomSampler(n, seed) with set_epoch(e).
    out = []
    cases = [(n, s) for n in [1, 2, 3, 5, 10, 17, 100] for s in [0, 1, 42]]
    cases += [(1000, 0), (1000, 5), (60000, 0)]
    for n, seed in cases:
        g = torch.Generator()
        g.manual_seed(seed)
        sampler = RandomSampler(range(n), generator=g)
        passes = [summarise(list(iter(sampler))) for _ in range(4)]
        out.append({"n": n, "seed": seed, "order": "sampler", "passes": passes})
    # The same through DataLoader(shuffle=True, generator=g), which also draws each pass's worker
    # base seed from g: RandomSampler(n, seed, RandomSampler::Order::kDataLoader).
    for n, seed in [(1, 0), (5, 0), (10, 1), (17, 42), (100, 0), (1000, 7)]:
        g = torch.Generator()
        g.manual_seed(seed)
        loader = DataLoader(range(n), batch_size=4, shuffle=True, generator=g)
        passes = [summarise([int(i) for b in loader for i in b]) for _ in range(4)]
        out.append({"n": n, "seed": seed, "order": "data_loader", "passes": passes})
    return out


def main():
    golden = {
        "torch_version": torch.__version__,
        "generator": generator_cases(),
        "randperm": randperm_cases(),
        "distributed_sampler": distributed_sampler_cases(),
        "random_sampler": random_sampler_cases(),
    }
    # One case per line: small diffs when the file is regenerated.
    with open(OUT, "w") as f:
        f.write("{\n")
        f.write(f'"torch_version": {json.dumps(golden["torch_version"])},\n')
        keys = ["generator", "randperm", "distributed_sampler", "random_sampler"]
        for k, key in enumerate(keys):
            f.write(f'"{key}": [\n')
            rows = [json.dumps(c, separators=(",", ":")) for c in golden[key]]
            f.write(",\n".join(rows))
            f.write("\n]" + (",\n" if k + 1 < len(keys) else "\n"))
        f.write("}\n")
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
