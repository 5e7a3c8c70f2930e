#include <cudnn.h>

#include <climits>

#include "kernels/cuda/conv2d_lowp.cuh"
#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/library_check.cuh"
#include "kernels/cuda/lowp_utils.cuh"

namespace dpe::cuda {

namespace {

// Algorithms whose workspace exceeds this are skipped (as conv2d.cu's).
constexpr size_t kMaxWorkspace = size_t{512} << 20;

int as_int(int64_t v) {
  DPE_CHECK(v <= INT_MAX, "conv2d: size " << v << " exceeds cuDNN's 32-bit sizes");
  return static_cast<int>(v);
}

cudnnDataType_t cudnn_type(DType dt) {
  switch (dt) {
    case DType::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case DType::kFloat16:
      return CUDNN_DATA_HALF;
    case DType::kFloat32:
    case DType::kInt64:
      break;
  }
  DPE_THROW("conv2d: no 16-bit CUDA kernel for " << dtype_name(dt));
}

// A ranked algorithm's math keeps the 16-bit data as it is: any math type but
// CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which may convert the data to another type first.
bool keeps_data(cudnnMathType_t m) { return m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION; }

// The GEMM-like algorithms, whose every output is a float32 sum of its terms rounded once (the
// host's contract, and the tests' bound). FFT and Winograd transform the data first, so their
// errors are not a sum's; they are skipped.
bool sums_terms(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}
bool sums_terms(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
bool sums_terms(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// The descriptors of one convolution in dtype dt, destroyed with it. The convolution computes in
// float32 with tensor-op math allowed; each algorithm chosen below sets its own math type.
struct Descriptors {
  int device;
  cudnnHandle_t handle;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Descriptors(CudaContext& ctx, DType dt, const Conv2dShape& s)
      : device(ctx.device()), handle(static_cast<cudnnHandle_t>(ctx.cudnn())) {
    const cudnnDataType_t t = cudnn_type(dt);
    try {
      DPE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x), device);
      DPE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y), device);
      DPE_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w), device);
      DPE_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv), device);
      DPE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, t, as_int(s.n), as_int(s.c),
                                                 as_int(s.h), as_int(s.w)),
                      device);
      DPE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, t, as_int(s.n), as_int(s.o),
                                                 as_int(s.ho), as_int(s.wo)),
                      device);
      DPE_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NCHW, as_int(s.o), as_int(s.c),
                                                 as_int(s.kh), as_int(s.kw)),
                      device);
      DPE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, as_int(s.padding), as_int(s.padding),
                                                      as_int(s.stride), as_int(s.stride), 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                      device);
      tensor_op_math();
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~Descriptors() { destroy(); }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  // What the heuristics are asked with: tensor-op math allowed, so they rank those algorithms too.
  void tensor_op_math() const {
    DPE_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_TENSOR_OP_MATH), device);
  }
  void math(cudnnMathType_t m) const {
    DPE_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, m), device);
  }

  void destroy() {
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    conv = nullptr;
    w = nullptr;
    y = x = nullptr;
  }
};

// Each *_algo: the first algorithm of the heuristics' ranking that reports success, keeps the
// data's dtype, sums terms and has a workspace size we accept, its math type set on the descriptor;
// `fallback` (supported for every NCHW convolution) in tensor-op math otherwise. Returns the
// algorithm and writes its workspace size.
cudnnConvolutionFwdAlgo_t forward_algo(const Descriptors& d, size_t* bytes) {
  d.tensor_op_math();
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  DPE_CUDNN_CHECK(
      cudnnGetConvolutionForwardAlgorithm_v7(d.handle, d.x, d.w, d.conv, d.y,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
      d.device);
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || !keeps_data(perf[i].mathType) ||
        !sums_terms(perf[i].algo)) {
      continue;
    }
    d.math(perf[i].mathType);
    size_t ws = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(d.handle, d.x, d.w, d.conv, d.y, perf[i].algo,
                                                &ws) != CUDNN_STATUS_SUCCESS ||
        ws > kMaxWorkspace) {
      continue;
    }
    *bytes = ws;
    return perf[i].algo;
  }
  d.tensor_op_math();
  const auto fallback = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  DPE_CUDNN_CHECK(
      cudnnGetConvolutionForwardWorkspaceSize(d.handle, d.x, d.w, d.conv, d.y, fallback, bytes),
      d.device);
  return fallback;
}

cudnnConvolutionBwdDataAlgo_t backward_data_algo(const Descriptors& d, size_t* bytes) {
  d.tensor_op_math();
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  DPE_CUDNN_CHECK(
      cudnnGetConvolutionBackwardDataAlgorithm_v7(
          d.handle, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
      d.device);
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || !keeps_data(perf[i].mathType) ||
        !sums_terms(perf[i].algo)) {
      continue;
    }
    d.math(perf[i].mathType);
    size_t ws = 0;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(d.handle, d.w, d.y, d.conv, d.x, perf[i].algo,
                                                     &ws) != CUDNN_STATUS_SUCCESS ||
        ws > kMaxWorkspace) {
      continue;
    }
    *bytes = ws;
    return perf[i].algo;
  }
  d.tensor_op_math();
  const auto fallback = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  DPE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(d.handle, d.w, d.y, d.conv, d.x,
                                                               fallback, bytes),
                  d.device);
  return fallback;
}

cudnnConvolutionBwdFilterAlgo_t backward_filter_algo(const Descriptors& d, size_t* bytes) {
  d.tensor_op_math();
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  DPE_CUDNN_CHECK(
      cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          d.handle, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf),
      d.device);
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || !keeps_data(perf[i].mathType) ||
        !sums_terms(perf[i].algo)) {
      continue;
    }
    d.math(perf[i].mathType);
    size_t ws = 0;
    if (cudnnGetConvolutionBackwardFilterWorkspaceSize(d.handle, d.x, d.y, d.conv, d.w,
                                                       perf[i].algo, &ws) != CUDNN_STATUS_SUCCESS ||
        ws > kMaxWorkspace) {
      continue;
    }
    *bytes = ws;
    return perf[i].algo;
  }
  d.tensor_op_math();
  const auto fallback = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  DPE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(d.handle, d.x, d.y, d.conv, d.w,
                                                                 fallback, bytes),
                  d.device);
  return fallback;
}

// y[n, o, s] = b[o]: the bias as the convolution's prior output (the words copied, no rounding).
__global__ void fill_channels_kernel(uint16_t* y, const uint16_t* b, int64_t total, int64_t o,
                                     int64_t plane) {
  DPE_GRID_STRIDE(i, total) y[i] = b[(i / plane) % o];
}

// gb[o] = the sum of gy[n, o, s] over (n, s) in float32, rounded once; one block per channel.
template <typename T>
__global__ void bias_grad_kernel(const T* gy, T* gb, int64_t n, int64_t o, int64_t plane) {
  __shared__ float shared[32];
  const int64_t ch = blockIdx.x;
  float acc = 0.0f;
  for (int64_t k = threadIdx.x; k < n * plane; k += blockDim.x) {
    acc += lowp_to_float(gy[((k / plane) * o + ch) * plane + k % plane]);
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) gb[ch] = lowp_from_float<T>(acc);
}

}  // namespace

void conv2d_forward_lowp(CudaContext& ctx, DType dt, const Conv2dShape& s, const void* x,
                         const void* w, const void* b, void* y) {
  DPE_CHECK(!s.channels_last, "conv2d_forward: no channels_last kernel on CUDA devices");
  Descriptors d(ctx, dt, s);
  size_t ws_bytes = 0;
  const cudnnConvolutionFwdAlgo_t algo = forward_algo(d, &ws_bytes);
  void* ws = ctx.workspace(ws_bytes);
  // Scaling factors are float for 16-bit data; cuDNN blends alpha * conv + beta * y in float32.
  const float one = 1.0f;
  float beta = 0.0f;
  if (b != nullptr) {
    const int64_t total = s.n * s.o * s.ho * s.wo;
    fill_channels_kernel<<<grid_for(total), kBlock, 0, stream_of(ctx)>>>(
        static_cast<uint16_t*>(y), static_cast<const uint16_t*>(b), total, s.o, s.ho * s.wo);
    DPE_CUDA_CHECK(cudaGetLastError());
    beta = 1.0f;
  }
  DPE_CUDNN_CHECK(cudnnConvolutionForward(d.handle, &one, d.x, x, d.w, w, d.conv, algo, ws,
                                          ws_bytes, &beta, d.y, y),
                  d.device);
}

void conv2d_backward_lowp(CudaContext& ctx, DType dt, const Conv2dShape& s, const void* x,
                          const void* w, const void* gy, void* gx, void* gw, void* gb) {
  DPE_CHECK(!s.channels_last, "conv2d_backward: no channels_last kernel on CUDA devices");
  Descriptors d(ctx, dt, s);
  const float one = 1.0f, zero = 0.0f;
  if (gx != nullptr) {
    size_t ws_bytes = 0;
    const cudnnConvolutionBwdDataAlgo_t algo = backward_data_algo(d, &ws_bytes);
    void* ws = ctx.workspace(ws_bytes);
    DPE_CUDNN_CHECK(cudnnConvolutionBackwardData(d.handle, &one, d.w, w, d.y, gy, d.conv, algo, ws,
                                                 ws_bytes, &zero, d.x, gx),
                    d.device);
  }
  if (gw != nullptr) {
    size_t ws_bytes = 0;
    const cudnnConvolutionBwdFilterAlgo_t algo = backward_filter_algo(d, &ws_bytes);
    void* ws = ctx.workspace(ws_bytes);
    DPE_CUDNN_CHECK(cudnnConvolutionBackwardFilter(d.handle, &one, d.x, x, d.y, gy, d.conv, algo,
                                                   ws, ws_bytes, &zero, d.w, gw),
                    d.device);
  }
  if (gb != nullptr && s.o > 0) {
    with_lowp_type(dt, "conv2d_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      bias_grad_kernel<T><<<static_cast<unsigned>(s.o), kBlock, 0, stream_of(ctx)>>>(
          static_cast<const T*>(gy), static_cast<T*>(gb), s.n, s.o, s.ho * s.wo);
    });
    DPE_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace dpe::cuda
