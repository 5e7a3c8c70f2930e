"""Repository rule that finds the CUDA toolkit, cuDNN and NCCL under /usr/local/cuda (or $CUDA_PATH).

It writes @local_cuda//:defs.bzl with CUDA_FOUND, so a machine without the toolkit still builds
the host backend, and @local_cuda//:cuda (headers, cudart, cuBLAS, cuDNN) and :nccl when found.
"""

_BUILD_FOUND = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**"], exclude = ["include/Openacc/**", "include/Openmp/**"]),
    includes = ["include"],
)

cc_library(
    name = "cuda",
    linkopts = [
        "-L{root}/lib64",
        "-Wl,-rpath,{root}/lib64",
        "-lcudnn",
        "-lcublasLt",
        "-lcublas",
        "-lcudart",
        "-ldl",
        "-lrt",
        "-pthread",
    ],
    deps = [":cuda_headers"],
)

cc_library(
    name = "nccl",
    linkopts = [
        "-L{root}/lib",
        "-L{root}/lib64",
        "-Wl,-rpath,{root}/lib",
        "-Wl,-rpath,{root}/lib64",
        "-lnccl",
    ],
    deps = [":cuda"],
)
"""

def _local_cuda_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(root + "/bin/nvcc")
    found = nvcc.exists
    if found:
        ctx.symlink(root + "/include", "include")
        ctx.file("BUILD", _BUILD_FOUND.format(root = root))
    else:
        ctx.file("BUILD", 'package(default_visibility = ["//visibility:public"])\n')
    ctx.file("defs.bzl", "CUDA_FOUND = %s\nNVCC = \"%s\"\n" % (found, str(nvcc)))

local_cuda = repository_rule(
    implementation = _local_cuda_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
