#include "kernels/cuda/conv2d.cuh"

#include <cudnn.h>

#include <climits>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/library_check.cuh"

namespace dpe::cuda {

namespace {

// Algorithms whose workspace exceeds this are skipped (the heuristics sometimes rank them first).
constexpr size_t kMaxWorkspace = size_t{512} << 20;

int as_int(int64_t v) {
  DPE_CHECK(v <= INT_MAX, "conv2d: size " << v << " exceeds cuDNN's 32-bit sizes");
  return static_cast<int>(v);
}

bool fp32_math(cudnnMathType_t m) { return m == CUDNN_DEFAULT_MATH || m == CUDNN_FMA_MATH; }

// The descriptors of one convolution, destroyed with it.
struct Descriptors {
  int device;
  cudnnHandle_t handle;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Descriptors(CudaContext& ctx, const Conv2dShape& s)
      : device(ctx.device()), handle(static_cast<cudnnHandle_t>(ctx.cudnn())) {
    try {
      DPE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x), device);
      DPE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y), device);
      DPE_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w), device);
      DPE_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv), device);
      DPE_CUDNN_CHECK(
          cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(s.n),
                                     as_int(s.c), as_int(s.h), as_int(s.w)),
          device);
      DPE_CUDNN_CHECK(
          cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(s.n),
                                     as_int(s.o), as_int(s.ho), as_int(s.wo)),
          device);
      DPE_CUDNN_CHECK(
          cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, as_int(s.o),
                                     as_int(s.c), as_int(s.kh), as_int(s.kw)),
          device);
      DPE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, as_int(s.padding), as_int(s.padding),
                                                      as_int(s.stride), as_int(s.stride), 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                      device);
      // FMA math: no TF32 on Ampere and later, so results stay comparable with the host's.
      DPE_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH), device);
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~Descriptors() { destroy(); }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

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

// The first algorithm of the heuristics' ranking that runs in FP32 math, reports success and
// has a workspace size we accept; `fallback` (supported for every NCHW float convolution)
// otherwise. Returns the algorithm and writes its workspace size.
cudnnConvolutionFwdAlgo_t forward_algo(const Descriptors& d, size_t* bytes) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  DPE_CUDNN_CHECK(
      cudnnGetConvolutionForwardAlgorithm_v7(d.handle, d.x, d.w, d.conv, d.y,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
      d.device);
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || !fp32_math(perf[i].mathType)) continue;
    size_t ws = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(d.handle, d.x, d.w, d.conv, d.y, perf[i].algo,
                                                &ws) != CUDNN_STATUS_SUCCESS ||
        ws > kMaxWorkspace) {
      continue;
    }
    *bytes = ws;
    return perf[i].algo;
  }
  const auto fallback = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  DPE_CUDNN_CHECK(
      cudnnGetConvolutionForwardWorkspaceSize(d.handle, d.x, d.w, d.conv, d.y, fallback, bytes),
      d.device);
  return fallback;
}

cudnnConvolutionBwdDataAlgo_t backward_data_algo(const Descriptors& d, size_t* bytes) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  DPE_CUDNN_CHECK(
      cudnnGetConvolutionBackwardDataAlgorithm_v7(
          d.handle, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
      d.device);
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || !fp32_math(perf[i].mathType)) continue;
    size_t ws = 0;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(d.handle, d.w, d.y, d.conv, d.x, perf[i].algo,
                                                     &ws) != CUDNN_STATUS_SUCCESS ||
        ws > kMaxWorkspace) {
      continue;
    }
    *bytes = ws;
    return perf[i].algo;
  }
  const auto fallback = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  DPE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(d.handle, d.w, d.y, d.conv, d.x,
                                                               fallback, bytes),
                  d.device);
  return fallback;
}

cudnnConvolutionBwdFilterAlgo_t backward_filter_algo(const Descriptors& d, size_t* bytes) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  DPE_CUDNN_CHECK(
      cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          d.handle, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf),
      d.device);
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || !fp32_math(perf[i].mathType)) continue;
    size_t ws = 0;
    if (cudnnGetConvolutionBackwardFilterWorkspaceSize(d.handle, d.x, d.y, d.conv, d.w,
                                                       perf[i].algo, &ws) != CUDNN_STATUS_SUCCESS ||
        ws > kMaxWorkspace) {
      continue;
    }
    *bytes = ws;
    return perf[i].algo;
  }
  const auto fallback = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  DPE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(d.handle, d.x, d.y, d.conv, d.w,
                                                                 fallback, bytes),
                  d.device);
  return fallback;
}

// y[n, o, s] += b[o].
__global__ void add_channel_bias_kernel(float* y, const float* b, int64_t total, int64_t o,
                                        int64_t plane) {
  DPE_GRID_STRIDE(i, total) y[i] += b[(i / plane) % o];
}

// gb[o] = sum of gy[n, o, s] over (n, s); one block per output channel.
__global__ void bias_grad_kernel(const float* gy, float* gb, int64_t n, int64_t o, int64_t plane) {
  __shared__ double shared[32];
  const int64_t ch = blockIdx.x;
  double acc = 0.0;
  for (int64_t k = threadIdx.x; k < n * plane; k += blockDim.x) {
    acc += gy[((k / plane) * o + ch) * plane + k % plane];
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) gb[ch] = static_cast<float>(acc);
}

}  // namespace

void conv2d_forward(CudaContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                    const float* b, float* y) {
  DPE_CHECK(!s.channels_last, "conv2d_forward: no channels_last kernel on CUDA devices");
  Descriptors d(ctx, s);
  size_t ws_bytes = 0;
  const cudnnConvolutionFwdAlgo_t algo = forward_algo(d, &ws_bytes);
  void* ws = ctx.workspace(ws_bytes);
  const float one = 1.0f, zero = 0.0f;
  DPE_CUDNN_CHECK(cudnnConvolutionForward(d.handle, &one, d.x, x, d.w, w, d.conv, algo, ws,
                                          ws_bytes, &zero, d.y, y),
                  d.device);
  if (b != nullptr) {
    const int64_t total = s.n * s.o * s.ho * s.wo;
    add_channel_bias_kernel<<<grid_for(total), kBlock, 0, stream_of(ctx)>>>(y, b, total, s.o,
                                                                            s.ho * s.wo);
    DPE_CUDA_CHECK(cudaGetLastError());
  }
}

void conv2d_backward(CudaContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                     const float* gy, float* gx, float* gw, float* gb) {
  DPE_CHECK(!s.channels_last, "conv2d_backward: no channels_last kernel on CUDA devices");
  Descriptors d(ctx, s);
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
    bias_grad_kernel<<<static_cast<unsigned>(s.o), kBlock, 0, stream_of(ctx)>>>(gy, gb, s.n, s.o,
                                                                                s.ho * s.wo);
    DPE_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace dpe::cuda
