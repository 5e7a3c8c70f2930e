"""Project macros: compiler flags defined once, and wrappers for libraries, binaries, tests and CUDA."""

load("@local_cuda//:defs.bzl", "CUDA_FOUND", "NVCC")

# Flags for project code only (system libraries are linked, not compiled).
DPE_COPTS = [
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    # GCC 12 reports false positives for std::variant members at -O2 (dpe::Value).
    "-Wno-maybe-uninitialized",
    "-fopenmp",
]

DPE_LINKOPTS = ["-fopenmp", "-pthread"]

def if_cuda(if_true, if_false = []):
    """Selects `if_true` when the CUDA backend is built: nvcc found and --//bazel:cuda not false."""
    if not CUDA_FOUND:
        return if_false
    return select({
        "//bazel:cuda_disabled": if_false,
        "//conditions:default": if_true,
    })

def dpe_cc_library(name, copts = [], linkopts = [], **kwargs):
    native.cc_library(
        name = name,
        copts = DPE_COPTS + copts,
        linkopts = DPE_LINKOPTS + linkopts,
        **kwargs
    )

def dpe_cc_binary(name, copts = [], linkopts = [], **kwargs):
    native.cc_binary(
        name = name,
        copts = DPE_COPTS + copts,
        linkopts = DPE_LINKOPTS + linkopts,
        **kwargs
    )

def dpe_cc_test(name, srcs = [], copts = [], linkopts = [], deps = [], size = "small",
                in_gpu_bundle = False, **kwargs):
    """A GoogleTest test; tag GPU tests with "gpu": they skip themselves without a device.

    Tests tagged "gpu" are left out of `bazel test //...` (.bazelrc's tag filter) and run from the
    GPU bundle's one test binary, //tests/gpu:gpu_tests (tools/gpu/README.md). Their cases (and
    those of a test with `in_gpu_bundle`, one whose cases also run on CUDA devices where there
    are some) are compiled once into `<name>_cases`, which both the test and that binary link.
    Every test carries the ThreadSanitizer suppressions in its own executable, where TSan looks.
    """
    if in_gpu_bundle or "gpu" in kwargs.get("tags", []):
        native.cc_library(
            name = name + "_cases",
            testonly = True,
            alwayslink = True,
            srcs = srcs,
            copts = DPE_COPTS + copts,
            linkopts = DPE_LINKOPTS + linkopts,
            deps = deps + ["@gtest"],
            visibility = ["//tests/gpu:__pkg__"],
        )
        srcs = []
        deps = [":" + name + "_cases"]
    native.cc_test(
        name = name,
        srcs = srcs + ["//tests:tsan_suppressions.cc"],
        copts = DPE_COPTS + copts,
        linkopts = DPE_LINKOPTS + linkopts,
        deps = deps + ["@gtest//:gtest_main"],
        size = size,
        **kwargs
    )

# sm_80 (A100), sm_90 (H100/H200); PTX for compute_90 lets newer GPUs JIT the kernels.
NVCC_FLAGS = " ".join([
    "-std=c++17",
    "-O3",
    "--expt-relaxed-constexpr",
    "-Xcompiler=-fPIC,-Wall,-Wextra,-Werror,-Wno-unused-parameter",
    "-Werror=all-warnings",
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "-DDPE_WITH_CUDA=1",
])

# nvcc's include path: dpe's sources, at the execroot's top in dpe's own workspace and under
# external/dpe when another workspace uses dpe (and the generated files likewise).
_ROOT = Label("//:BUILD").workspace_root
_NVCC_INCLUDES = "-I%s -I$(GENDIR)/%s" % (_ROOT, _ROOT) if _ROOT else "-I. -I$(GENDIR)"

# Headers every .cu file may include (nvcc runs in a genrule, which sees only declared inputs).
_NVCC_COMMON_HDRS = [
    "//engine/core:dtype.h",
    "//engine/core:error.h",
    "//engine/core:low_precision.h",
    "//kernels:op_params.h",
]

def dpe_cuda_library(name, srcs = [], hdrs = [], deps = [], nvcc_hdrs = [], visibility = None, **kwargs):
    """Compiles `srcs` (.cu files) with nvcc into objects wrapped in a cc_library.

    `nvcc_hdrs` lists headers of other packages that the .cu files include.
    Without the CUDA toolkit, or with --config=nocuda, the library is empty, so targets that
    depend on it still build; code that calls into it is guarded by DPE_WITH_CUDA.
    """
    objs = []
    if CUDA_FOUND:
        for src in srcs:
            obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
            native.genrule(
                name = obj + "_nvcc",
                srcs = [src] + hdrs + nvcc_hdrs + _NVCC_COMMON_HDRS,
                outs = [obj],
                cmd = "%s %s %s -c $(location %s) -o $@" % (NVCC, NVCC_FLAGS, _NVCC_INCLUDES, src),
                message = "nvcc " + src,
                visibility = ["//visibility:private"],
            )
            objs.append(obj)
    native.cc_library(
        name = name,
        srcs = if_cuda(objs),
        hdrs = hdrs,
        copts = DPE_COPTS,
        linkopts = DPE_LINKOPTS,
        defines = if_cuda(["DPE_WITH_CUDA=1"]),
        deps = deps + if_cuda(["@local_cuda//:cuda"]),
        visibility = visibility,
        **kwargs
    )
