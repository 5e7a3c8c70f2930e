"""The CUDA kernels, one library per op (kernels/cuda/BUILD), all linked by the CUDA backend."""

CUDA_KERNEL_OPS = [
    "batch_norm",
    "bmm",
    "conv2d",
    "dropout",
    "elementwise",
    "embedding",
    "gelu",
    "layer_norm",
    "linear",
    "log_softmax",
    "matmul",
    "max_pool2d",
    "nll_loss",
    "optim_step",
    "reduce",
    "softmax",
]
