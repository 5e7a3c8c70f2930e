"""The host kernels, one library per op (kernels/host/BUILD), all linked by the host backend."""

HOST_KERNEL_OPS = [
    "batch_norm",
    "batch_norm_relu",
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
