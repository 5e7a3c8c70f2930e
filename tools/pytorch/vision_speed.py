#!/usr/bin/python3
"""PyTorch 1.13 and dpe side by side on the bench's ConvNet, Mlp and ResNet-tiny, one device, in
one run.

The same models as models/convnet.cc, models/mlp.cc and models/resnet.cc (ConvNet: two blocks of
conv 5x5 pad 2, BatchNorm, ReLU, 2x2 max pooling, then a linear layer to 10 classes; Mlp:
784-512-512-10 with ReLUs; resnet-tiny: torchvision's ResNet with one Bottleneck a stage, width 8,
one input channel, written out here as torchvision is not packaged for Debian's torch), SGD lr
0.01 momentum 0.9, cross-entropy, on the same batch as dpe's bench: the first
`batch` training images of Fashion-MNIST, normalised with dpe's mean and std. For each thread
count it alternates PyTorch and dpe's //tools:bench (`--devices 1 --threads T`) for --rounds
rounds, so both see the same machine, and prints samples per second as the median step time of
each round, the medians over rounds and their ratio:

  tools/bazelw build //tools:bench
  /usr/bin/python3 tools/pytorch/vision_speed.py --dpe-bench bazel-bin/tools/bench
  /usr/bin/python3 tools/pytorch/vision_speed.py --dpe-bench bazel-bin/tools/bench \
      --channels-last true   # both in channels last

Debian's python3-torch multiplies with the reference libblas (about 6 GFLOP/s) unless an
optimized BLAS is installed. PyTorch runs here on OpenBLAS's OpenMP build (`apt-get install
libopenblas0-openmp`, loaded through LD_LIBRARY_PATH, whatever the system default): with the
pthread build's own threads beside PyTorch's OpenMP threads the Mlp ran at 7,600 samples/s on 2
threads against 45,000 with the OpenMP build (batch 256, measured 2026-11-24). The script refuses
to compare against a BLAS slower than 20 GFLOP/s per thread. PyTorch's convolutions go through its
bundled oneDNN either way.
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before torch loads OpenBLAS
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MEAN, STD = 0.2860, 0.3530  # engine/data/fashion_mnist.h
OPENBLAS_OPENMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 5, padding=2), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.MaxPool2d(2))


class Bottleneck(nn.Module):
    """torchvision's: 1x1, 3x3 (the stride), 1x1 to 4x the width, each with BatchNorm, ReLU
    after the first two and after the residual sum; a 1x1 conv + BatchNorm downsample where the
    shape changes."""

    def __init__(self, cin, width, stride):
        super().__init__()
        out = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != out:
            self.downsample = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        h = self.relu(self.bn1(self.conv1(x)))
        h = self.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return self.relu(h + (x if self.downsample is None else self.downsample(x)))


def resnet_tiny():
    """models/resnet.cc's resnet-tiny with one input channel (as dpe's bench runs it)."""
    layers = [nn.Conv2d(1, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 8
    for k in range(4):
        layers.append(Bottleneck(cin, 8 << k, 1 if k == 0 else 2))
        cin = 4 * (8 << k)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10))


def make_model(name):
    if name == "resnet-tiny":
        return resnet_tiny()
    if name == "convnet":
        return nn.Sequential(conv_block(1, 16), conv_block(16, 32), nn.Flatten(),
                             nn.Linear(7 * 7 * 32, 10))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                         nn.ReLU(), nn.Linear(512, 10))


def fashion_batch(data_dir, n):
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:n]
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STD
    return x, torch.from_numpy(labels.astype(np.int64))


def median_step_seconds(model, x, y, a, before_step=lambda: None):
    """SGD steps of `model` on (x, y): the median time of a.steps after a.warmup; before_step runs
    untimed before each (DDP's barrier)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times = []
    for step in range(a.warmup + a.steps):
        before_step()
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def laid_out(model, x, a):
    """The model and batch in torch.channels_last with --channels-last true (the ConvNet's
    activations then stay NHWC, as dpe's bench --channels-last keeps them), else as they are."""
    if a.channels_last == "true":
        return model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    return model, x


def pytorch_samples_per_second(model_name, batch, a):
    torch.manual_seed(0)
    x, y = fashion_batch(a.data_dir, batch)
    model, x = laid_out(make_model(model_name), x, a)
    return batch / median_step_seconds(model, x, y, a)


def ddp_rank(rank, world, model_name, batch, port, a, result):
    """One rank of PyTorch's DDP over Gloo, one thread, its slice of the global batch (as dpe's
    bench: rank r takes samples [r * batch / world, (r + 1) * batch / world))."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    x, y = fashion_batch(a.data_dir, batch)
    model, x = laid_out(make_model(model_name), x, a)
    model = nn.parallel.DistributedDataParallel(model)
    per = batch // world
    x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
    # Every rank starts each step together, as in dpe's bench.
    seconds = median_step_seconds(model, x, y, a, before_step=torch.distributed.barrier)
    if rank == 0:
        result.put(batch / seconds)
    torch.distributed.destroy_process_group()


def pytorch_ddp_samples_per_second(model_name, batch, world, a):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    result = ctx.Queue()
    procs = [ctx.Process(target=ddp_rank, args=(r, world, model_name, batch, port, a, result))
             for r in range(world)]
    for p in procs:
        p.start()
    value = result.get(timeout=600)
    for p in procs:
        p.join()
    return value


def pytorch_child(args, threads, a):
    """Runs this script for one PyTorch measurement in a fresh process on `threads` threads."""
    env = dict(os.environ, LD_LIBRARY_PATH=OPENBLAS_OPENMP, OPENBLAS_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, __file__, "--dpe-bench", a.dpe_bench, "--steps",
                          str(a.steps), "--warmup", str(a.warmup), "--data-dir", a.data_dir,
                          "--channels-last", a.channels_last, "--precision", a.precision] + args,
                         env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return float(out.split()[-1])


def dpe_rows(model_name, batch, threads, a, devices=1, backends="mpi"):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        subprocess.run([a.dpe_bench, "--models", model_name, "--devices", str(devices),
                        "--batch-size", str(batch), "--threads", str(threads), "--warmup",
                        str(a.warmup), "--steps", str(a.steps), "--data-dir", a.data_dir,
                        "--ddp-backends", backends, "--fuse", a.dpe_fuse, "--channels-last",
                        a.channels_last, "--precision", a.precision, "--json", out, "--svg",
                        os.path.join(tmp, "bench.svg")],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)["results"]


def dpe_samples_per_second(model_name, batch, threads, a):
    rows = dpe_rows(model_name, batch, threads, a)
    return next(r["samples_per_second"] for r in rows if r["mode"] == "single")


def dpe_ddp_samples_per_second(model_name, batch, world, a):
    """dpe's DDP on `world` ranks of one thread, over Gloo and over MPI: {backend: samples/s}."""
    rows = dpe_rows(model_name, batch, 1, a, world, "gloo,mpi")
    return {r["ddp_backend"]: r["samples_per_second"] for r in rows if r["mode"] == "ddp"}


def blas_gflops(threads):
    torch.set_num_threads(threads)
    x = torch.randn(1024, 1024)
    x @ x
    start = time.perf_counter()
    for _ in range(4):
        x @ x
    return 4 * 2 * 1024 ** 3 / (time.perf_counter() - start) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dpe-bench", required=True, help="path of //tools:bench")
    ap.add_argument("--models", default="convnet,mlp")
    ap.add_argument("--batch-size", "--batches", dest="batches", default="100,256",
                    help="global batch sizes, a list (a set of rows each)")
    ap.add_argument("--threads", default="1,2",
                    help="compute threads, each a set of rows ('': none, DDP only)")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: both under autocast(bfloat16), PyTorch's torch.autocast('cpu') "
                         "and dpe's bench --precision bf16")
    ap.add_argument("--pytorch-only", help=argparse.SUPPRESS)  # model,batch,threads: one child
    ap.add_argument("--blas-only", type=int, help=argparse.SUPPRESS)  # threads: one child
    ap.add_argument("--pytorch-ddp", help=argparse.SUPPRESS)  # model,batch,world: one child
    ap.add_argument("--dpe-fuse", choices=["true", "false"], default="true",
                    help="dpe's bench --fuse: batch norm + ReLU as one op (dpe's default) or as "
                         "PyTorch's eager mode runs them")
    ap.add_argument("--channels-last", choices=["true", "false"], default="false",
                    help="both frameworks' images and activations channels last "
                         "(torch.channels_last; dpe's bench --channels-last), or NCHW (the default)")
    ap.add_argument("--ddp", type=int, default=2,
                    help="also DDP on this many ranks of one thread (0: none): PyTorch over "
                         "Gloo against dpe over Gloo and over MPI")
    a = ap.parse_args()
    if a.pytorch_only:
        model_name, batch, threads = a.pytorch_only.split(",")
        torch.set_num_threads(int(threads))
        print(pytorch_samples_per_second(model_name, int(batch), a))
        return
    if a.blas_only:
        print(blas_gflops(a.blas_only))
        return
    if a.pytorch_ddp:
        model_name, batch, world = a.pytorch_ddp.split(",")
        print(pytorch_ddp_samples_per_second(model_name, int(batch), int(world), a))
        return
    if not os.path.exists(os.path.join(OPENBLAS_OPENMP, "libblas.so.3")):
        ap.error("install libopenblas0-openmp: PyTorch runs on OpenBLAS's OpenMP build here")
    rows = []
    print(f"precision {a.precision}; pytorch {torch.__version__} on {OPENBLAS_OPENMP}; "
          f"{a.steps} timed steps after {a.warmup} warm-up, "
          f"median step; medians of {a.rounds} alternating rounds; dpe's batch norm + ReLU "
          f"{'fused' if a.dpe_fuse == 'true' else 'unfused'}; images "
          f"{'channels last' if a.channels_last == 'true' else 'NCHW'}", flush=True)
    for threads in (int(t) for t in a.threads.split(",") if t):
        blas = pytorch_child(["--blas-only", str(threads)], threads, a)
        print(f"pytorch matmul 1024^3 on {threads} thread(s): {blas:.1f} GFLOP/s", flush=True)
        if blas < 20 * threads:
            ap.error(f"PyTorch multiplies at {blas:.1f} GFLOP/s: the reference BLAS; "
                     "install libopenblas0-pthread for a fair comparison")
        for model_name in a.models.split(","):
            for batch in (int(b) for b in a.batches.split(",")):
                pt, dp = [], []
                for _ in range(a.rounds):
                    pt.append(pytorch_child(["--pytorch-only", f"{model_name},{batch},{threads}"],
                                            threads, a))
                    dp.append(dpe_samples_per_second(model_name, batch, threads, a))
                p, d = statistics.median(pt), statistics.median(dp)
                rows.append({"model": model_name, "batch": batch, "threads": threads,
                             "pytorch_samples_per_second": p, "dpe_samples_per_second": d,
                             "rounds_pytorch": pt, "rounds_dpe": dp})
                print(f"{model_name:8s} batch {batch:4d} threads {threads}: pytorch {p:9.1f} "
                      f"samples/s, dpe {d:9.1f} samples/s, dpe/pytorch {d / p:5.2f}x "
                      f"(rounds: pytorch {', '.join(f'{v:.0f}' for v in pt)}; "
                      f"dpe {', '.join(f'{v:.0f}' for v in dp)})", flush=True)
    for model_name in a.models.split(",") if a.ddp > 1 else []:
        for batch in (int(b) for b in a.batches.split(",")):
            pt, gloo, mpi = [], [], []
            for _ in range(a.rounds):
                pt.append(pytorch_child(["--pytorch-ddp", f"{model_name},{batch},{a.ddp}"], 1, a))
                d = dpe_ddp_samples_per_second(model_name, batch, a.ddp, a)
                gloo.append(d["gloo"])
                mpi.append(d["mpi"])
            p, g, m = (statistics.median(v) for v in (pt, gloo, mpi))
            rows.append({"model": model_name, "batch": batch, "ddp_ranks": a.ddp,
                         "pytorch_gloo_samples_per_second": p, "dpe_gloo_samples_per_second": g,
                         "dpe_mpi_samples_per_second": m, "rounds_pytorch": pt,
                         "rounds_dpe_gloo": gloo, "rounds_dpe_mpi": mpi})
            print(f"{model_name:8s} global batch {batch:4d} DDP {a.ddp} ranks: pytorch/gloo "
                  f"{p:9.1f}, dpe/gloo {g:9.1f} ({g / p:.2f}x), dpe/mpi {m:9.1f} ({m / p:.2f}x) "
                  f"samples/s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"pytorch": torch.__version__, "dpe_fuse": a.dpe_fuse == "true",
                       "channels_last": a.channels_last == "true", "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
