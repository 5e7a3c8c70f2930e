// Shape and device ops: views and copies whose backward reshapes or moves the gradient back.
#include "engine/autograd/autocast_ops.h"
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"
#include "engine/tensor/concat.h"

namespace dpe::ops {

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor out = x.reshape(shape).detach();
  const Shape in_shape = x.shape();
  record("reshape", {x}, {&out}, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(in_shape)};
  });
  return out;
}

Tensor flatten(const Tensor& x, int64_t start_dim) {
  const int64_t s = x.shape().normalize_dim(start_dim);
  std::vector<int64_t> dims(x.shape().begin(), x.shape().begin() + s);
  int64_t rest = 1;
  for (int64_t i = s; i < x.dim(); ++i) rest *= x.size(i);
  dims.push_back(rest);
  return reshape(x, Shape(dims));
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  Tensor out = x.permute(dims).detach();
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    inverse[x.shape().normalize_dim(dims[i])] = static_cast<int64_t>(i);
  }
  record("permute", {x}, {&out}, [inverse](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].permute(inverse)};
  });
  return out;
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  Tensor out = x.narrow(dim, start, length).detach();
  const Shape shape = x.shape();
  const int64_t d = shape.normalize_dim(dim);
  record("narrow", {x}, {&out}, [shape, d, start, length](const std::vector<Tensor>& g) {
    // Into the gradient that already arrived where the engine offers it (node.h, "accumulation
    // offers"): attention's q, k and v are slices of one tensor, whose gradient is then one
    // tensor of zeros and three slices added in, not three such tensors and two full-size sums.
    if (Tensor acc = offered_accumulator(0);
        acc.defined() && acc.shape() == shape && acc.dtype() == g[0].dtype()) {
      Tensor slot = acc.narrow(d, start, length);
      if (slot.is_contiguous()) {
        const Tensor part = g[0].contiguous();
        dispatch(prim::Add{slot, part, 1.0f, slot});
        return std::vector<Tensor>{acc};
      }
    }
    Tensor gx = Tensor::zeros(shape, g[0].dtype(), g[0].device());
    Tensor slot = gx.narrow(d, start, length);
    if (slot.is_contiguous()) {
      slot.copy_(g[0]);
    } else {
      // Move dim d to the front, where a slice is contiguous.
      std::vector<int64_t> order{d};
      for (int64_t i = 0; i < gx.dim(); ++i) {
        if (i != d) order.push_back(i);
      }
      Tensor front = gx.permute(order).contiguous();
      front.narrow(0, start, length).copy_(g[0].permute(order).contiguous());
      std::vector<int64_t> back(order.size());
      for (size_t i = 0; i < order.size(); ++i) back[order[i]] = static_cast<int64_t>(i);
      gx = front.permute(back).contiguous();
    }
    return std::vector<Tensor>{gx};
  });
  return out;
}

Tensor to(const Tensor& x, Device device) {
  if (x.device() == device) return x;
  Tensor out = x.to(device);
  const Device from = x.device();
  record("to", {x}, {&out},
         [from](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].to(from)}; });
  return out;
}

Tensor to(const Tensor& x, DType dtype) {
  DPE_CHECK(x.defined(), "to: the tensor is undefined");
  if (x.dtype() == dtype) return x;
  DPE_CHECK(!x.requires_grad() || is_floating_point(dtype),
            "to: a tensor that requires grad converts to a floating dtype, not "
                << dtype_name(dtype));
  Tensor out = x.to(dtype);
  const DType from = x.dtype();
  record("to", {x}, {&out},
         [from](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].to(from)}; });
  return out;
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim, const Device* device) {
  if (!xs.empty() && autocast_detail::applies(xs[0])) {  // autocast's promote list
    DType widest = xs[0].dtype();
    for (const Tensor& x : xs) {
      if (is_floating_point(x.dtype()) && is_floating_point(widest)) {
        widest = promote_types(widest, x.dtype());
      }
    }
    const autocast_detail::Running running;
    std::vector<Tensor> same;
    for (const Tensor& x : xs) same.push_back(is_floating_point(x.dtype()) ? to(x, widest) : x);
    return cat(same, dim, device);
  }
  Tensor out = concat("cat", xs, dim, device);
  const int64_t d = xs[0].shape().normalize_dim(dim);
  std::vector<int64_t> sizes;
  std::vector<Device> devices;
  for (const Tensor& x : xs) {
    sizes.push_back(x.shape()[d]);
    devices.push_back(x.device());
  }
  record("cat", xs, {&out}, [sizes, devices, d](const std::vector<Tensor>& g) {
    std::vector<Tensor> grads;
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(g[0].narrow(d, start, sizes[i]).to(devices[i]).contiguous());
      start += sizes[i];
    }
    return grads;
  });
  return out;
}

}  // namespace dpe::ops
