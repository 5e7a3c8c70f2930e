#include "kernels/cuda/cuda_context.h"

#include <cublas_v2.h>
#include <cudnn.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/library_check.cuh"

namespace dpe::cuda {

struct CudaContext::Impl {
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  cudaEvent_t compute_done = nullptr;
  cudaEvent_t copy_done = nullptr;
  cublasHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

CudaContext::CudaContext(int device) : device_(device) {}

CudaContext::~CudaContext() {
  if (!impl_) return;
  // May run during static destruction, after the CUDA runtime has begun to unload: ignore errors.
  Impl& r = *impl_;
  if (cudaSetDevice(device_) != cudaSuccess) return;
  if (r.workspace != nullptr) cudaFree(r.workspace);
  if (r.dnn != nullptr) cudnnDestroy(r.dnn);
  if (r.blas != nullptr) cublasDestroy(r.blas);
  if (r.compute_done != nullptr) cudaEventDestroy(r.compute_done);
  if (r.copy_done != nullptr) cudaEventDestroy(r.copy_done);
  if (r.copy != nullptr) cudaStreamDestroy(r.copy);
  if (r.compute != nullptr) cudaStreamDestroy(r.compute);
  cudaGetLastError();
}

CudaContext::Impl& CudaContext::impl() {
  std::call_once(once_, [this] {
    DPE_CUDA_CHECK(cudaSetDevice(device_));
    auto r = std::make_unique<Impl>();
    // Blocking streams (cudaStreamDefault): see the design note in cuda_context.h.
    DPE_CUDA_CHECK(cudaStreamCreateWithFlags(&r->compute, cudaStreamDefault));
    DPE_CUDA_CHECK(cudaStreamCreateWithFlags(&r->copy, cudaStreamDefault));
    DPE_CUDA_CHECK(cudaEventCreateWithFlags(&r->compute_done, cudaEventDisableTiming));
    DPE_CUDA_CHECK(cudaEventCreateWithFlags(&r->copy_done, cudaEventDisableTiming));
    DPE_CUBLAS_CHECK(cublasCreate(&r->blas), device_);
    DPE_CUBLAS_CHECK(cublasSetStream(r->blas, r->compute), device_);
    // FP32 results comparable with the host backend: no TF32 tensor-core rounding. A 16-bit
    // product (GemmEx, float32 compute) reduces its split-K partial sums in float32 too, not in
    // its output's dtype (PyTorch's allow_fp16_reduced_precision_reduction = False): each output
    // is rounded once, as the host's.
    const auto math = static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    DPE_CUBLAS_CHECK(cublasSetMathMode(r->blas, math), device_);
    DPE_CUDNN_CHECK(cudnnCreate(&r->dnn), device_);
    DPE_CUDNN_CHECK(cudnnSetStream(r->dnn, r->compute), device_);
    impl_ = std::move(r);
  });
  // call_once rethrows a failure and lets the next caller retry; impl_ is set only on success.
  return *impl_;
}

void* CudaContext::stream() { return impl().compute; }
void* CudaContext::copy_stream() { return impl().copy; }
void* CudaContext::cublas() { return impl().blas; }
void* CudaContext::cudnn() { return impl().dnn; }

void* CudaContext::workspace(size_t bytes) {
  Impl& r = impl();
  if (bytes > r.workspace_bytes) {
    DPE_CUDA_CHECK(cudaSetDevice(device_));
    if (r.workspace != nullptr) {
      // Kernels queued earlier may still use the old buffer; cudaFree is also documented to
      // synchronise, but the explicit wait does not depend on that.
      DPE_CUDA_CHECK(cudaStreamSynchronize(r.compute));
      DPE_CUDA_CHECK(cudaFree(r.workspace));
      r.workspace = nullptr;
      r.workspace_bytes = 0;
    }
    // Round up so that slowly growing requests do not reallocate every time.
    size_t rounded = size_t{1} << 20;
    while (rounded < bytes) rounded *= 2;
    const cudaError_t err = cudaMalloc(&r.workspace, rounded);
    if (err != cudaSuccess) {
      cudaGetLastError();
      r.workspace = nullptr;
      DPE_THROW("out of memory on cuda:" << device_ << ": cannot allocate a workspace of "
                                         << rounded << " bytes: " << cudaGetErrorString(err));
    }
    r.workspace_bytes = rounded;
  }
  return r.workspace;
}

void CudaContext::synchronize() { DPE_CUDA_CHECK(cudaStreamSynchronize(impl().compute)); }

void CudaContext::copy_waits_for_compute() {
  Impl& r = impl();
  DPE_CUDA_CHECK(cudaEventRecord(r.compute_done, r.compute));
  DPE_CUDA_CHECK(cudaStreamWaitEvent(r.copy, r.compute_done, 0));
}

void CudaContext::compute_waits_for_copy() {
  Impl& r = impl();
  DPE_CUDA_CHECK(cudaEventRecord(r.copy_done, r.copy));
  DPE_CUDA_CHECK(cudaStreamWaitEvent(r.compute, r.copy_done, 0));
}

void CudaContext::read_back(void* host_dst, const void* device_src, size_t bytes) {
  Impl& r = impl();
  DPE_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, r.compute));
  DPE_CUDA_CHECK(cudaStreamSynchronize(r.compute));
}

void enable_peer_access_from(int device) {
  DPE_CUDA_CHECK(cudaSetDevice(device));
  int count = 0;
  DPE_CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int peer = 0; peer < count; ++peer) {
    if (peer == device) continue;
    int can = 0;
    DPE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
    if (!can) continue;
    const cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();  // not an error for us; clear it so later checks start clean
      continue;
    }
    DPE_CUDA_CHECK(err);
  }
}

}  // namespace dpe::cuda
