#include "engine/tensor/tensor.h"

#include <cstring>
#include <numeric>
#include <sstream>

#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/device/step_observer.h"

namespace dpe {

namespace {

std::shared_ptr<TensorImpl> make_impl(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) DPE_CHECK(d >= 0, "negative size in " << shape);
  auto impl = std::make_shared<TensorImpl>();
  DeviceContext& ctx = Runtime::get().context(device);
  impl->storage =
      std::make_shared<Storage>(ctx, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  impl->shape = shape;
  impl->strides = shape.contiguous_strides();
  impl->dtype = dtype;
  return impl;
}

// Copies the (possibly strided) view `src` into contiguous memory at dst on dst_ctx through the
// device interface, which counts the bytes in the Runtime's copy matrix when they cross devices.
void copy_view_to(const Tensor& src, DeviceContext& dst_ctx, void* dst) {
  StridedView view;
  view.data = src.raw_data();
  view.elem_size = dtype_size(src.dtype());
  view.sizes = src.shape().dims();
  view.strides = src.strides();
  Runtime::get().copy(dst_ctx, dst, src.context(), view);
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return Tensor(make_impl(shape, dtype, device));
}

const char* memory_format_name(MemoryFormat format) {
  return format == MemoryFormat::kChannelsLast ? "channels_last" : "contiguous_format";
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  if (format == MemoryFormat::kContiguous) return empty(shape, dtype, device);
  DPE_CHECK(shape.rank() == 4,
            "empty: channels_last needs a 4-D shape [N, C, H, W], got " << shape);
  return empty(Shape{shape[0], shape[2], shape[3], shape[1]}, dtype, device).permute({0, 3, 1, 2});
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::ones(const Shape& shape, Device device) { return full(shape, 1.0f, device); }

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, DType::kFloat32, device);
  t.fill_(value);
  return t;
}

namespace {

template <class T>
Tensor from_host_values(const std::vector<T>& values, const Shape& shape, Device device) {
  DPE_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
            "from_vector: " << values.size() << " values do not fill " << shape);
  Tensor t = Tensor::empty(shape, DTypeOf<T>::value, device);
  Runtime& rt = Runtime::get();
  rt.copy(t.context(), t.raw_data(), rt.context(Device()), values.data(), t.nbytes());
  return t;
}

}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, Device device) {
  return from_host_values(values, shape, device);
}
Tensor Tensor::from_vector(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  return from_host_values(values, shape, device);
}

Tensor Tensor::scalar(float value, Device device) { return full(Shape{}, value, device); }

void Tensor::check_defined(const char* what) const {
  DPE_CHECK(impl_ != nullptr, what << ": the tensor is undefined");
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}

const std::vector<int64_t>& Tensor::strides() const {
  check_defined("strides");
  return impl_->strides;
}

DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}

Device Tensor::device() const {
  check_defined("device");
  return impl_->storage->context().device();
}

DeviceContext& Tensor::context() const {
  check_defined("context");
  return impl_->storage->context();
}

bool Tensor::is_contiguous() const {
  const auto& dims = shape().dims();
  int64_t expected = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    if (dims[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= dims[i];
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::kContiguous) return is_contiguous();
  if (dim() != 4) return false;
  int64_t expected = 1;
  for (const int d : {1, 3, 2, 0}) {
    if (size(d) == 1) continue;
    if (impl_->strides[d] != expected) return false;
    expected *= size(d);
  }
  return true;
}

MemoryFormat Tensor::suggest_memory_format() const {
  // PyTorch's is_channels_last_strides_2d: the strides grow in the order C, W, H, N.
  if (!defined() || dim() != 4 || impl_->strides[1] == 0) return MemoryFormat::kContiguous;
  int64_t min = 0;
  for (const int d : {1, 3, 2, 0}) {
    if (size(d) == 0 || impl_->strides[d] < min) return MemoryFormat::kContiguous;
    // N111 with equal strides: ambiguous, and contiguous by default.
    if (d == 0 && min == impl_->strides[1]) return MemoryFormat::kContiguous;
    min = impl_->strides[d] * (size(d) > 1 ? size(d) : 1);
  }
  return MemoryFormat::kChannelsLast;
}

// Already laid out in `format`: dense so, and for channels last also saying so by its strides
// (a one-channel NCHW image is dense in both layouts but suggests contiguous, so its convolution
// would answer NCHW: it is restrided, as PyTorch's x.to(memory_format=torch.channels_last)).
bool Tensor::laid_out(MemoryFormat format) const {
  return is_contiguous(format) &&
         (format == MemoryFormat::kContiguous || suggest_memory_format() == format);
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  check_defined("contiguous");
  if (laid_out(format)) return *this;
  return to(device(), format);
}

Tensor Tensor::to(Device device, MemoryFormat format) const {
  check_defined("to");
  if (format == MemoryFormat::kContiguous) {
    return device == this->device() ? contiguous() : to(device);
  }
  DPE_CHECK(dim() == 4, "to: channels_last needs a 4-D tensor [N, C, H, W], got " << str());
  if (device == this->device() && laid_out(format)) return *this;
  Tensor out = empty(shape(), dtype(), device, format);  // an NHWC buffer, permuted
  copy_view_to(permute({0, 2, 3, 1}), out.context(), out.raw_data());
  return out;
}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

void* Tensor::raw_data() const {
  check_defined("data");
  DPE_CHECK(!impl_->storage->released(),
            "data of " << str() << ", whose storage is released (a sharded module's parameters are "
                            "read outside its forward or backward)");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * dtype_size(impl_->dtype);
}

template <typename T>
T* Tensor::data() const {
  check_defined("data");
  DPE_CHECK(impl_->dtype == DTypeOf<T>::value, "data<" << dtype_name(DTypeOf<T>::value)
                                                       << ">() called on a tensor of dtype "
                                                       << dtype_name(impl_->dtype));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template int64_t* Tensor::data<int64_t>() const;
template BFloat16* Tensor::data<BFloat16>() const;
template Float16* Tensor::data<Float16>() const;

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_defined("to_vector");
  DPE_CHECK(dtype() == DTypeOf<T>::value, "to_vector<" << dtype_name(DTypeOf<T>::value)
                                                       << "> called on a tensor of dtype "
                                                       << dtype_name(dtype()));
  std::vector<T> out(static_cast<size_t>(numel()));
  if (out.empty()) return out;
  Tensor host = device().is_host() ? contiguous() : to(Device());
  std::memcpy(out.data(), host.raw_data(), out.size() * sizeof(T));
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;
template std::vector<Float16> Tensor::to_vector<Float16>() const;

float Tensor::item() const {
  DPE_CHECK(numel() == 1, "item(): a Tensor with "
                              << numel() << " elements cannot be converted to a scalar (" << shape()
                              << ")");
  DPE_CHECK(is_floating_point(dtype()),
            "item(): a floating tensor's value as float32; got dtype " << dtype_name(dtype()));
  return (dtype() == DType::kFloat32 ? *this : to(DType::kFloat32)).to_vector<float>()[0];
}

Tensor Tensor::to(Device device) const {
  check_defined("to");
  if (device == this->device()) return *this;
  Tensor out = empty(shape(), dtype(), device);
  copy_view_to(*this, out.context(), out.raw_data());
  return out;
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to");
  if (dtype == this->dtype()) return *this;
  // Dense in its own order (contiguous, channels last, any permutation): converted in place of
  // its storage order, keeping the strides. Otherwise gathered contiguous first.
  const Tensor src = is_contiguous(suggest_memory_format()) ? *this : contiguous();
  Tensor out = empty(src.shape(), dtype, device(), src.suggest_memory_format());
  if (StepObserver* observer = step_observer();
      observer != nullptr && !observer->on_convert(device(), src.dtype(), dtype, numel())) {
    return out;  // an observer that skips the work (engine/device/step_observer.h)
  }
  context().convert(out.raw_data(), dtype, src.raw_data(), src.dtype(), numel());
  return out;
}

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor out = empty(shape(), dtype(), device());
  copy_view_to(*this, out.context(), out.raw_data());
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

void Tensor::copy_(const Tensor& src) {
  DPE_CHECK(src.shape() == shape(),
            "copy_: source " << src.shape() << " does not match destination " << shape());
  DPE_CHECK(is_contiguous(), "copy_: the destination must be contiguous, got " << str());
  if (src.dtype() != dtype()) {
    // Converted where the source is, then copied (PyTorch's copy_ converts too).
    const Tensor converted = src.contiguous().to(dtype());
    copy_view_to(converted, context(), raw_data());
  } else {
    copy_view_to(src, context(), raw_data());
  }
  bump_version();
}

void Tensor::fill_(float value) {
  check_defined("fill_");
  DPE_CHECK(is_contiguous(), "fill_: the tensor must be contiguous, got " << str());
  if (StepObserver* observer = step_observer();
      observer != nullptr && !observer->on_fill(device(), static_cast<int64_t>(nbytes()))) {
    bump_version();
    return;  // an observer that skips the work (engine/device/step_observer.h)
  }
  switch (dtype()) {
    case DType::kFloat32: context().fill(raw_data(), &value, sizeof(float), numel()); break;
    case DType::kInt64: {
      const int64_t v = static_cast<int64_t>(value);
      context().fill(raw_data(), &v, sizeof v, numel());
      break;
    }
    case DType::kBFloat16: {
      const BFloat16 v = to_bfloat16(value);
      context().fill(raw_data(), &v, sizeof v, numel());
      break;
    }
    case DType::kFloat16: {
      const Float16 v = to_float16(value);
      context().fill(raw_data(), &v, sizeof v, numel());
      break;
    }
  }
  bump_version();
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  check_defined("narrow");
  const int64_t d = shape().normalize_dim(dim);
  const int64_t n = shape()[d];
  DPE_CHECK(start >= 0 && length >= 0 && start + length <= n,
            "narrow: start (" << start << ") + length (" << length << ") exceeds dimension size ("
                              << n << ") of " << shape());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->dtype = impl_->dtype;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset + start * impl_->strides[d];
  std::vector<int64_t> dims = shape().dims();
  dims[d] = length;
  impl->shape = Shape(dims);
  return Tensor(impl);
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  DPE_CHECK(chunks > 0, "chunk expects `chunks` to be greater than 0, got: " << chunks);
  const int64_t n = size(dim);
  const int64_t split_size = (n + chunks - 1) / chunks;
  // torch.chunk (1.13) on an empty dim returns `chunks` empty pieces.
  if (split_size == 0) return std::vector<Tensor>(static_cast<size_t>(chunks), narrow(dim, 0, 0));
  return split(split_size, dim);
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  DPE_CHECK(split_size > 0,
            "split expects split_size be positive, but got split_size=" << split_size);
  const int64_t n = size(dim);
  std::vector<Tensor> out;
  for (int64_t start = 0; start < n; start += split_size) {
    out.push_back(narrow(dim, start, std::min(split_size, n - start)));
  }
  if (out.empty()) out.push_back(narrow(dim, 0, 0));
  return out;
}

std::vector<Tensor> Tensor::split_with_sizes(const std::vector<int64_t>& sizes, int64_t dim) const {
  const int64_t n = size(dim);
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  DPE_CHECK(total == n, "split_with_sizes expects split_sizes to sum exactly to "
                            << n << " (input tensor's size at dimension " << dim
                            << "), but got split_sizes summing to " << total);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    DPE_CHECK(s >= 0, "split_with_sizes: negative size " << s);
    out.push_back(narrow(dim, start, s));
    start += s;
  }
  return out;
}

namespace {
Shape infer_shape(const Shape& requested, int64_t numel, const Shape& from) {
  std::vector<int64_t> dims = requested.dims();
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      DPE_CHECK(infer < 0, "only one dimension can be inferred in " << requested);
      infer = static_cast<int64_t>(i);
    } else {
      DPE_CHECK(dims[i] >= 0, "invalid shape dimension " << dims[i] << " in " << requested);
      known *= dims[i];
    }
  }
  if (infer >= 0) {
    DPE_CHECK(known > 0 && numel % known == 0, "shape '" << requested
                                                         << "' is invalid for input of size "
                                                         << numel << " (" << from << ")");
    dims[infer] = numel / known;
  }
  Shape out(dims);
  DPE_CHECK(out.numel() == numel, "shape '" << requested << "' is invalid for input of size "
                                            << numel << " (" << from << ")");
  return out;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  DPE_CHECK(is_contiguous(), "view: the tensor is not contiguous (" << str() << "); use reshape");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->dtype = impl_->dtype;
  impl->offset = impl_->offset;
  impl->shape = infer_shape(shape, numel(), this->shape());
  impl->strides = impl->shape.contiguous_strides();
  return Tensor(impl);
}

Tensor Tensor::reshape(const Shape& shape) const { return contiguous().view(shape); }

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  DPE_CHECK(static_cast<int64_t>(dims.size()) == dim(),
            "permute: number of dims (" << dims.size() << ") doesn't match the tensor's " << dim()
                                        << " (" << shape() << ")");
  std::vector<bool> seen(dims.size(), false);
  std::vector<int64_t> sizes, strides;
  for (int64_t d : dims) {
    const int64_t nd = shape().normalize_dim(d);
    DPE_CHECK(!seen[nd], "permute: repeated dim " << d);
    seen[nd] = true;
    sizes.push_back(shape()[nd]);
    strides.push_back(impl_->strides[nd]);
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->dtype = impl_->dtype;
  impl->offset = impl_->offset;
  impl->shape = Shape(sizes);
  impl->strides = strides;
  return Tensor(impl);
}

Tensor Tensor::flatten(int64_t start_dim) const {
  const int64_t s = shape().normalize_dim(start_dim);
  std::vector<int64_t> dims(shape().begin(), shape().begin() + s);
  dims.push_back(-1);
  if (numel() == 0) {
    int64_t rest = 1;
    for (int64_t i = s; i < dim(); ++i) rest *= size(i);
    dims.back() = rest;
  }
  return reshape(Shape(dims));
}

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->dtype = impl_->dtype;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  return Tensor(impl);
}

Tensor& Tensor::requires_grad_(bool value) {
  check_defined("requires_grad_");
  DPE_CHECK(!value || is_floating_point(dtype()),
            "only floating-point tensors can require gradients, got " << dtype_name(dtype()));
  impl_->autograd.requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const {
  check_defined("grad");
  return Tensor(impl_->autograd.grad);
}

void Tensor::set_grad(const Tensor& grad) {
  check_defined("set_grad");
  if (grad.defined()) {
    DPE_CHECK(grad.shape() == shape(),
              "set_grad: gradient " << grad.shape() << " does not match tensor " << shape());
    DPE_CHECK(grad.device() == device(),
              "set_grad: gradient on " << grad.device() << " for a tensor on " << device());
  }
  impl_->autograd.grad = grad.impl_ptr();
}

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(shape=" << shape() << ", dtype=" << dtype_name(dtype()) << ", device=" << device()
     << ")";
  return os.str();
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  DPE_CHECK(a.device() == b.device(),
            op << ": expected all tensors to be on the same device, but found at least two "
                  "devices, "
               << a.device() << " and " << b.device() << "!");
}

void check_dtype(const char* op, const Tensor& t, DType dtype, const char* what) {
  DPE_CHECK(t.dtype() == dtype, op << ": expected dtype " << dtype_name(dtype) << " but got "
                                   << dtype_name(t.dtype()) << " for " << what);
}

}  // namespace dpe
