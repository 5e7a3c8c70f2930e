// Tensor: an n-dimensional view (shape, strides, offset) of a Storage on one device, plus the
// autograd state that engine/autograd reads and writes.
//
// Design note "data ops and differentiable ops": the methods of Tensor work on data and record
// nothing in the autograd graph (like PyTorch under no_grad). Differentiable versions of the same
// operations are functions in dpe::ops (engine/autograd/ops.h), which the modules use.
//
// Threading contract: a Tensor handle may be copied and read from any thread; writing the same
// tensor's data from two threads at once is a data race, as in PyTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/device/device_context.h"
#include "engine/core/dtype.h"
#include "engine/tensor/shape.h"
#include "engine/tensor/storage.h"

namespace dpe {

// How a 4-D tensor [N, C, H, W] lays its elements out, as torch.memory_format: contiguous (NCHW,
// W fastest) or channels last (NHWC strides, C fastest: the layout the convolution kernels want,
// so that a channels-last network runs without reorders between its layers). A channels-last
// tensor is an ordinary strided view: Tensor::empty(..., kChannelsLast) is an [N, H, W, C]
// buffer permuted to [N, C, H, W]. See docs/channels_last.md.
enum class MemoryFormat { kContiguous, kChannelsLast };
const char* memory_format_name(MemoryFormat format);  // "contiguous_format", "channels_last"

class Node;              // engine/autograd/node.h
struct GradDestination;  // engine/autograd/node.h
class Tensor;
struct TensorImpl;

// The autograd state of a tensor. Owned by engine/autograd; defined here so a tensor carries it.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;     // the node that produced this tensor (non-leaf)
  uint32_t output_nr = 0;            // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;  // a leaf's AccumulateGrad node, shared by all its uses
  // Called after a gradient has been accumulated into `grad` (DDP's bucketing uses it).
  std::vector<std::function<void(Tensor&)>> post_accumulate_hooks;
  // Where a leaf's next gradient may be written directly (design note "gradient destinations").
  std::shared_ptr<GradDestination> grad_destination;
  std::string name;  // for error messages ("fc.weight")
  // What this leaf's .grad counts as in its device's memory breakdown: a sharded module's
  // parameter views hand their gradient on to a reduce-scatter at once (communication).
  MemoryCategory grad_category = MemoryCategory::kGradients;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  std::vector<int64_t> strides;  // in elements
  DType dtype = DType::kFloat32;
  AutogradMeta autograd;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- factories (on host:0 unless a device is given) ---
  static Tensor empty(const Shape& shape, DType dtype = DType::kFloat32, Device device = {});
  // kChannelsLast needs a 4-D shape.
  static Tensor empty(const Shape& shape, DType dtype, Device device, MemoryFormat format);
  static Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32, Device device = {});
  static Tensor ones(const Shape& shape, Device device = {});
  static Tensor full(const Shape& shape, float value, Device device = {});
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            Device device = {});
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape,
                            Device device = {});
  // (16-bit tensors: from_vector(...).to(dtype); a list of floats stays float32's.)
  static Tensor scalar(float value, Device device = {});

  // --- properties ---
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim() const { return shape().rank(); }
  int64_t size(int64_t dim) const { return shape()[dim]; }
  int64_t numel() const { return shape().numel(); }
  const std::vector<int64_t>& strides() const;
  DType dtype() const;
  Device device() const;
  DeviceContext& context() const;
  bool is_contiguous() const;
  // Dense in `format`'s order (size-1 dims do not count, as PyTorch's: [N, 1, H, W] is both).
  bool is_contiguous(MemoryFormat format) const;
  // The layout the strides say, PyTorch's suggest_memory_format: channels last when a 4-D
  // tensor's strides order C fastest, then W, H and N, ambiguous strides (N111) resolving to
  // contiguous. Ops on channels-last inputs write channels-last outputs.
  MemoryFormat suggest_memory_format() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  // True when both handles view the same storage.
  bool shares_storage(const Tensor& other) const;
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // Pointer to the first element; T must match dtype(). On CUDA this is a device pointer.
  template <typename T>
  T* data() const;
  void* raw_data() const;

  // --- host access (copies from the device when needed) ---
  float item() const;  // the value of a one-element floating tensor, as float32
  template <typename T>
  std::vector<T> to_vector() const;

  // --- data operations (no autograd recording) ---
  // A copy on `device` counted in the Runtime's copy matrix; *this when already there.
  Tensor to(Device device) const;
  // torch.Tensor.to(dtype): *this when already of `dtype`, else a copy converted on this device
  // (round to nearest even into bfloat16 and float16; int64 from a floating value truncates), laid
  // out as *this when it is dense in some order (a channels-last tensor stays channels last),
  // else contiguous. No autograd recording (ops::to records it).
  Tensor to(DType dtype) const;
  Tensor clone() const;       // same device, contiguous, new storage
  Tensor contiguous() const;  // *this when already contiguous
  // *this when already laid out in `format` (dense so and, for channels last, suggesting it:
  // a one-channel NCHW image is restrided, as torch's x.to(memory_format=channels_last)), else a
  // copy laid out so.
  Tensor contiguous(MemoryFormat format) const;
  // to(device), laid out in `format` there (a copy even on the same device when the layout
  // differs).
  Tensor to(Device device, MemoryFormat format) const;
  void copy_(const Tensor& src);  // same shape; any devices; converts a source of another dtype
  void fill_(float value);  // rounded to the dtype (to nearest even; truncated for int64)
  void zero_() { fill_(0.0f); }
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;  // a view
  // torch.chunk: ceil(n / chunks) per piece, so fewer pieces may come back (5 over 4: 2, 2, 1).
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split_with_sizes(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  Tensor view(const Shape& shape) const;     // requires contiguous; a -1 size is inferred
  Tensor reshape(const Shape& shape) const;  // a view when contiguous, else a copy
  Tensor permute(const std::vector<int64_t>& dims) const;  // a view
  Tensor flatten(int64_t start_dim = 1) const;
  Tensor detach() const;  // shares data, no autograd history

  // --- autograd state (see engine/autograd) ---
  bool requires_grad() const { return impl_ && impl_->autograd.requires_grad; }
  Tensor& requires_grad_(bool value = true);
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  const std::shared_ptr<Node>& grad_fn() const { return impl_->autograd.grad_fn; }
  bool is_leaf() const { return !impl_ || impl_->autograd.grad_fn == nullptr; }
  AutogradMeta& autograd() const { return impl_->autograd; }
  // The version counter of the data, shared with every view of the same storage: every in-place
  // write bumps it (copy_, fill_, optimizer steps, running statistics, gradient accumulation), and
  // a backward refuses a saved tensor whose version moved since its op was recorded.
  void bump_version() { impl_->storage->bump_version(); }
  uint64_t version() const { return impl_->storage->version(); }

  // The role of this tensor's storage in its device's memory breakdown (memory_category.h); a view
  // retags the whole storage it shares.
  MemoryCategory memory_category() const { return impl_->storage->category(); }
  void set_memory_category(MemoryCategory category) const {
    impl_->storage->set_category(category);
  }

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  std::string str() const;  // "tensor(shape=torch.Size([2, 3]), dtype=float32, device=host:0)"

 private:
  void check_defined(const char* what) const;
  bool laid_out(MemoryFormat format) const;  // see contiguous(format)
  std::shared_ptr<TensorImpl> impl_;
};

// Helpers for error messages and argument checks shared by every op.
// Throws "<op>: expected all tensors to be on the same device, but found host:0 and host:1".
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
// Throws "<op>: expected dtype float32 but got int64 for <what>".
void check_dtype(const char* op, const Tensor& t, DType dtype, const char* what);

}  // namespace dpe
