"""The CUDA kernels, one library per op (kernels/cuda/BUILD), all linked by the CUDA backend."""

CUDA_KERNEL_OPS = [
    "batch_norm",
    "bmm",
    "conv2d",
    "conv2d_lowp",
    "dropout",
    "elementwise",
    "elementwise_lowp",
    "embedding",
    "gelu",
    "layer_norm",
    "linear",
    "linear_lowp",
    "log_softmax",
    "matmul",
    "max_pool2d",
    "nll_loss",
    "optim_step",
    "reduce",
    "softmax",
]
