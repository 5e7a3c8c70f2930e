// The op consistency test: every differentiable op's backward, on every available backend,
// against central finite differences of its forward (differences taken in double precision over
// a random projection of the output). CUDA devices join automatically where a GPU exists.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/device/runtime.h"
#include "engine/tensor/random.h"

namespace dpe {
namespace {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct OpCase {
  std::string name;
  std::vector<Shape> input_shapes;
  OpFn fn;
  std::vector<int64_t> int_inputs = {};  // indices of inputs replaced by int64 labels
  int64_t classes = 0;                   // label range for int inputs
  bool positive = false;                 // inputs in (0.5, 1.5), e.g. away from relu's kink
};

// x [N, C, H, W] as a channels-last copy, differentiably (an NHWC copy seen as NCHW).
Tensor channels_last(const Tensor& x) {
  const Tensor nhwc = ops::permute(x, {0, 2, 3, 1});
  return ops::permute(ops::reshape(nhwc, nhwc.shape()), {0, 3, 1, 2});
}

// An op on channels-last input must answer channels last (on the host, which has the kernels).
Tensor stays_channels_last(const Tensor& y) {
  if (y.device().is_host() && y.suggest_memory_format() != MemoryFormat::kChannelsLast) {
    throw std::runtime_error("expected a channels_last output, got strides of " + y.str());
  }
  return y;
}

// Elementwise ops and reductions.
std::vector<OpCase> elementwise_cases() {
  return {
      {"add", {{3, 4}, {3, 4}}, [](auto& x) { return ops::add(x[0], x[1]); }},
      {"sub", {{3, 4}, {3, 4}}, [](auto& x) { return ops::sub(x[0], x[1]); }},
      {"mul", {{3, 4}, {3, 4}}, [](auto& x) { return ops::mul(x[0], x[1]); }},
      {"mul_scalar", {{5}}, [](auto& x) { return ops::mul_scalar(x[0], -2.5f); }},
      {"relu", {{4, 5}}, [](auto& x) { return ops::relu(x[0]); }},
      {"gelu", {{2, 3, 4}}, [](auto& x) { return ops::gelu(x[0]); }},
      {"sum", {{3, 5}}, [](auto& x) { return ops::sum(x[0]); }},
      {"mean", {{3, 5}}, [](auto& x) { return ops::mean(x[0]); }},
  };
}

// Shapes: views, slices and concatenation.
std::vector<OpCase> shape_cases() {
  return {
      {"reshape",
       {{3, 4}},
       [](auto& x) {
         return ops::reshape(x[0], {2, 6});
       }},
      {"flatten", {{2, 3, 2}}, [](auto& x) { return ops::flatten(x[0], 1); }},
      {"permute",
       {{2, 3, 4}},
       [](auto& x) {
         return ops::permute(x[0], {2, 0, 1});
       }},
      {"narrow_dim0", {{5, 3}}, [](auto& x) { return ops::narrow(x[0], 0, 1, 3); }},
      {"narrow_dim1", {{3, 5}}, [](auto& x) { return ops::narrow(x[0], 1, 2, 2); }},
      {"cat_dim0",
       {{2, 3}, {4, 3}},
       [](auto& x) {
         return ops::cat({x[0], x[1]}, 0);
       }},
      {"cat_dim1",
       {{2, 3}, {2, 1}},
       [](auto& x) {
         return ops::cat({x[0], x[1]}, 1);
       }},
  };
}

// Matrix products: matmul, bmm (each transpose), linear.
std::vector<OpCase> matmul_cases() {
  return {
      {"matmul", {{3, 4}, {4, 5}}, [](auto& x) { return ops::matmul(x[0], x[1]); }},
      {"bmm", {{2, 3, 4}, {2, 4, 5}}, [](auto& x) { return ops::bmm(x[0], x[1]); }},
      {"bmm_trans_a", {{2, 4, 3}, {2, 4, 5}}, [](auto& x) { return ops::bmm(x[0], x[1], true); }},
      {"bmm_trans_b",
       {{2, 3, 4}, {2, 5, 4}},
       [](auto& x) { return ops::bmm(x[0], x[1], false, true); }},
      {"bmm_trans_both",
       {{2, 4, 3}, {2, 5, 4}},
       [](auto& x) { return ops::bmm(x[0], x[1], true, true); }},
      {"matmul_4d", {{2, 2, 3, 4}, {2, 2, 4, 3}}, [](auto& x) { return ops::matmul(x[0], x[1]); }},
      {"linear", {{4, 6}, {3, 6}, {3}}, [](auto& x) { return ops::linear(x[0], x[1], x[2]); }},
      {"linear_no_bias",
       {{4, 6}, {3, 6}},
       [](auto& x) { return ops::linear(x[0], x[1], Tensor()); }},
  };
}

// Convolution and max pooling (NCHW).
std::vector<OpCase> conv_pool_cases() {
  return {
      {"conv2d",
       {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}},
       [](auto& x) { return ops::conv2d(x[0], x[1], x[2], 1, 0); }},
      {"conv2d_stride2_pad1",
       {{2, 2, 7, 7}, {3, 2, 3, 3}, {3}},
       [](auto& x) { return ops::conv2d(x[0], x[1], x[2], 2, 1); }},
      {"conv2d_5x5_pad2_no_bias",
       {{1, 2, 6, 6}, {2, 2, 5, 5}},
       [](auto& x) { return ops::conv2d(x[0], x[1], Tensor(), 1, 2); }},
      {"max_pool2d", {{2, 3, 6, 6}}, [](auto& x) { return ops::max_pool2d(x[0], 2, 2, 0); }},
      {"max_pool2d_k3s2p1", {{1, 2, 7, 7}}, [](auto& x) { return ops::max_pool2d(x[0], 3, 2, 1); }},
  };
}

// Channels last: the same ops on NHWC activations.
std::vector<OpCase> channels_last_cases() {
  return {
      {"conv2d_channels_last",
       {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}},
       [](auto& x) {
         return stays_channels_last(ops::conv2d(channels_last(x[0]), x[1], x[2], 2, 1));
       }},
      {"conv2d_one_channel_channels_last",
       {{2, 1, 6, 6}, {3, 1, 5, 5}},
       [](auto& x) {
         return stays_channels_last(ops::conv2d(channels_last(x[0]), x[1], Tensor(), 1, 2));
       }},
      {"max_pool2d_channels_last",
       {{2, 3, 7, 7}},
       [](auto& x) { return stays_channels_last(ops::max_pool2d(channels_last(x[0]), 3, 2, 1)); }},
      {"batch_norm_relu_train_channels_last",
       {{4, 3, 2, 3}, {3}, {3}},
       [](auto& x) {
         Tensor rm, rv;
         return stays_channels_last(
             ops::batch_norm_relu(channels_last(x[0]), x[1], x[2], rm, rv, true, 0.1f, 1e-5f));
       }},
      {"batch_norm_train_channels_last",
       {{4, 3, 2, 3}, {3}, {3}},
       [](auto& x) {
         Tensor rm, rv;
         return stays_channels_last(
             ops::batch_norm(channels_last(x[0]), x[1], x[2], rm, rv, true, 0.1f, 1e-5f));
       }},
      {"relu_channels_last",
       {{2, 3, 2, 4}},
       [](auto& x) { return stays_channels_last(ops::relu(channels_last(x[0]))); }},
      {"add_channels_last_and_contiguous",
       {{2, 3, 2, 4}, {2, 3, 2, 4}},
       [](auto& x) { return stays_channels_last(ops::add(channels_last(x[0]), x[1])); }},
  };
}

// Batch norm and its fusions, in training and in evaluation.
std::vector<OpCase> batch_norm_cases() {
  return {
      {"batch_norm_train",
       {{4, 3, 2, 2}, {3}, {3}},
       [](auto& x) {
         Tensor rm, rv;
         return ops::batch_norm(x[0], x[1], x[2], rm, rv, true, 0.1f, 1e-5f);
       }},
      {"batch_norm_train_2d",
       {{6, 4}, {4}, {4}},
       [](auto& x) {
         Tensor rm, rv;
         return ops::batch_norm(x[0], x[1], x[2], rm, rv, true, 0.1f, 1e-5f);
       }},
      {"batch_norm_relu_train",
       {{4, 3, 2, 2}, {3}, {3}},
       [](auto& x) {
         Tensor rm, rv;
         return ops::batch_norm_relu(x[0], x[1], x[2], rm, rv, true, 0.1f, 1e-5f);
       }},
      {"batch_norm_relu_train_2d",
       {{6, 4}, {4}, {4}},
       [](auto& x) {
         Tensor rm, rv;
         return ops::batch_norm_relu(x[0], x[1], x[2], rm, rv, true, 0.1f, 1e-5f);
       }},
      {"batch_norm_add_relu_train",
       {{4, 3, 2, 2}, {4, 3, 2, 2}, {3}, {3}},
       [](auto& x) {
         Tensor rm, rv;
         return ops::batch_norm_add_relu(x[0], x[1], x[2], x[3], rm, rv, true, 0.1f, 1e-5f);
       }},
      {"batch_norm_add_relu_train_channels_last",
       {{4, 3, 2, 3}, {4, 3, 2, 3}, {3}, {3}},
       [](auto& x) {
         Tensor rm, rv;
         return stays_channels_last(ops::batch_norm_add_relu(
             channels_last(x[0]), channels_last(x[1]), x[2], x[3], rm, rv, true, 0.1f, 1e-5f));
       }},
      {"batch_norm_relu_max_pool_train",
       {{4, 3, 4, 4}, {3}, {3}},
       [](auto& x) {
         Tensor rm, rv;
         return ops::batch_norm_relu_max_pool2d(x[0], x[1], x[2], rm, rv, true, 0.1f, 1e-5f, 2);
       }},
      {"batch_norm_relu_max_pool_train_overlapping",
       {{3, 2, 5, 5}, {2}, {2}},
       [](auto& x) {
         Tensor rm, rv;
         return ops::batch_norm_relu_max_pool2d(x[0], x[1], x[2], rm, rv, true, 0.1f, 1e-5f, 3, 2,
                                                1);
       }},
      {"batch_norm_relu_max_pool_train_window_wider_than_input",
       {{3, 2, 4, 2}, {2}, {2}},
       [](auto& x) {
         Tensor rm, rv;
         return ops::batch_norm_relu_max_pool2d(x[0], x[1], x[2], rm, rv, true, 0.1f, 1e-5f, 3, 1,
                                                1);
       }},
      {"batch_norm_relu_max_pool_train_channels_last",
       {{4, 3, 4, 6}, {3}, {3}},
       [](auto& x) {
         Tensor rm, rv;
         return stays_channels_last(ops::batch_norm_relu_max_pool2d(channels_last(x[0]), x[1], x[2],
                                                                    rm, rv, true, 0.1f, 1e-5f, 2));
       }},
      {"batch_norm_relu_max_pool_eval",
       {{3, 2, 4, 4}, {2}, {2}},
       [](auto& x) {
         Tensor rm = Tensor::from_vector(std::vector<float>{0.1f, -0.2f}, {2}, x[0].device());
         Tensor rv = Tensor::from_vector(std::vector<float>{0.5f, 2.0f}, {2}, x[0].device());
         return ops::batch_norm_relu_max_pool2d(x[0], x[1], x[2], rm, rv, false, 0.1f, 1e-5f, 2);
       }},
      {"batch_norm_relu_eval",
       {{3, 2, 2, 2}, {2}, {2}},
       [](auto& x) {
         Tensor rm = Tensor::from_vector(std::vector<float>{0.1f, -0.2f}, {2}, x[0].device());
         Tensor rv = Tensor::from_vector(std::vector<float>{0.5f, 2.0f}, {2}, x[0].device());
         return ops::batch_norm_relu(x[0], x[1], x[2], rm, rv, false, 0.1f, 1e-5f);
       }},
      {"batch_norm_eval",
       {{3, 2, 2, 2}, {2}, {2}},
       [](auto& x) {
         Tensor rm = Tensor::from_vector(std::vector<float>{0.1f, -0.2f}, {2}, x[0].device());
         Tensor rv = Tensor::from_vector(std::vector<float>{0.5f, 2.0f}, {2}, x[0].device());
         return ops::batch_norm(x[0], x[1], x[2], rm, rv, false, 0.1f, 1e-5f);
       }},
  };
}

// Embedding, layer norm and dropout.
std::vector<OpCase> embedding_layer_norm_dropout_cases() {
  return {
      {"embedding", {{5, 3}, {2, 4}}, [](auto& x) { return ops::embedding(x[0], x[1]); }, {1}, 5},
      {"layer_norm",
       {{2, 3, 5}, {5}, {5}},
       [](auto& x) { return ops::layer_norm(x[0], x[1], x[2], 1e-5f); }},
      {"layer_norm_no_affine",
       {{4, 6}},
       [](auto& x) { return ops::layer_norm(x[0], Tensor(), Tensor(), 1e-5f); }},
      {"dropout",
       {{4, 6}},
       [](auto& x) {
         return ops::dropout(x[0], 0.3f, true, 7);  // the same mask for every evaluation
       }},
      {"dropout_3d", {{2, 3, 4}}, [](auto& x) { return ops::dropout(x[0], 0.5f, true, 11); }},
      {"dropout_4d", {{2, 2, 3, 2}}, [](auto& x) { return ops::dropout(x[0], 0.2f, true, 3); }},
  };
}

// Log-softmax, softmax (causal too) and attention.
std::vector<OpCase> softmax_attention_cases() {
  return {
      {"log_softmax", {{4, 5}}, [](auto& x) { return ops::log_softmax(x[0]); }},
      {"softmax", {{2, 3, 5}}, [](auto& x) { return ops::softmax(x[0]); }},
      {"softmax_causal", {{2, 4, 4}}, [](auto& x) { return ops::softmax(x[0], true); }},
      {"softmax_causal_more_keys", {{2, 3, 5}}, [](auto& x) { return ops::softmax(x[0], true); }},
      {"attention_causal",
       {{1, 2, 4, 3}, {1, 2, 4, 3}, {1, 2, 4, 2}},
       [](auto& x) { return ops::scaled_dot_product_attention(x[0], x[1], x[2], true); }},
      {"attention_dropout",
       {{2, 1, 3, 2}, {2, 1, 5, 2}, {2, 1, 5, 3}},
       [](auto& x) { return ops::scaled_dot_product_attention(x[0], x[1], x[2], false, 0.3f, 9); }},
  };
}

// Losses.
std::vector<OpCase> loss_cases() {
  return {
      {"nll_loss", {{5, 4}, {5}}, [](auto& x) { return ops::nll_loss(x[0], x[1]); }, {1}, 4},
      {"cross_entropy",
       {{6, 3}, {6}},
       [](auto& x) { return ops::cross_entropy(x[0], x[1]); },
       {1},
       3},
      // Labels are drawn in [0, classes): ignoring class 1 skips some of them.
      {"nll_loss_ignore_index",
       {{8, 3}, {8}},
       [](auto& x) { return ops::nll_loss(x[0], x[1], 1); },
       {1},
       3},
      {"cross_entropy_3d_ignore_index",
       {{2, 4, 5}, {2, 4}},
       [](auto& x) { return ops::cross_entropy(x[0], x[1], 2); },
       {1},
       5},
      {"mse_loss", {{3, 4}, {3, 4}}, [](auto& x) { return ops::mse_loss(x[0], x[1]); }},
  };
}

// Every case, group by group in this order.
std::vector<OpCase> op_cases() {
  std::vector<OpCase> all;
  for (std::vector<OpCase> (*group)() :
       {elementwise_cases, shape_cases, matmul_cases, conv_pool_cases, channels_last_cases,
        batch_norm_cases, embedding_layer_norm_dropout_cases, softmax_attention_cases,
        loss_cases}) {
    for (OpCase& c : group()) all.push_back(std::move(c));
  }
  return all;
}

std::vector<Device> available_devices() {
  std::vector<Device> out{Device::parse("host:0")};
  for (Device d : Runtime::get().devices(DeviceType::kCuda)) out.push_back(d);
  return out;
}

struct Param {
  OpCase op;
  Device device;
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.op.name << " on " << p.device; }

std::string param_name(const testing::TestParamInfo<Param>& info) {
  return info.param.op.name + "_" + (info.param.device.is_host() ? "host" : "cuda") +
         std::to_string(info.param.device.index());
}

class GradcheckTest : public testing::TestWithParam<Param> {};

// <v, f(x)> in double.
double project(const Tensor& y, const std::vector<float>& v) {
  const std::vector<float> yv = y.to_vector<float>();
  double s = 0;
  for (size_t i = 0; i < yv.size(); ++i) s += static_cast<double>(yv[i]) * v[i];
  return s;
}

TEST_P(GradcheckTest, BackwardMatchesCentralDifferences) {
  const OpCase& op = GetParam().op;
  const Device dev = GetParam().device;
  Generator gen(1234);
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < op.input_shapes.size(); ++i) {
    const Shape& s = op.input_shapes[i];
    const bool is_int = std::find(op.int_inputs.begin(), op.int_inputs.end(),
                                  static_cast<int64_t>(i)) != op.int_inputs.end();
    if (is_int) {
      std::vector<int64_t> labels(static_cast<size_t>(s.numel()));
      for (auto& l : labels) l = static_cast<int64_t>(gen.next_u64() % op.classes);
      inputs.push_back(Tensor::from_vector(labels, s, dev));
      continue;
    }
    // Distinct values at least `spacing` apart and none near 0, in random order, so max and
    // relu have no ties or kinks within the finite-difference step.
    const int64_t n = s.numel();
    const float spacing = std::min(0.1f, 2.4f / static_cast<float>(n));
    const std::vector<int64_t> order = randperm(n, gen);
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      v[k] = (static_cast<float>(order[k]) - static_cast<float>(n) / 2 + 0.5f) * spacing;
    }
    Tensor t = Tensor::from_vector(v, s, dev);
    t.requires_grad_(true);
    inputs.push_back(t);
  }

  Tensor y = op.fn(inputs);
  std::vector<float> v(static_cast<size_t>(y.numel()));
  for (float& x : v) x = gen.uniform(-1.0f, 1.0f);
  backward({y}, {Tensor::from_vector(v, y.shape(), y.device())});

  NoGradGuard no_grad;
  const double h = 1e-3;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != DType::kFloat32) continue;
    const Tensor grad = inputs[i].grad();
    ASSERT_TRUE(grad.defined()) << op.name << ": input " << i << " got no gradient";
    ASSERT_EQ(grad.shape(), inputs[i].shape());
    ASSERT_EQ(grad.device(), inputs[i].device());
    const std::vector<float> analytic = grad.to_vector<float>();
    std::vector<float> base = inputs[i].to_vector<float>();
    double max_err = 0, max_ref = 1e-3;
    for (size_t k = 0; k < base.size(); ++k) {
      std::vector<Tensor> plus = inputs, minus = inputs;
      std::vector<float> p = base, m = base;
      p[k] += static_cast<float>(h);
      m[k] -= static_cast<float>(h);
      plus[i] = Tensor::from_vector(p, inputs[i].shape(), dev);
      minus[i] = Tensor::from_vector(m, inputs[i].shape(), dev);
      const double numeric = (project(op.fn(plus), v) - project(op.fn(minus), v)) / (2 * h);
      max_err = std::max(max_err, std::abs(numeric - analytic[k]));
      max_ref = std::max(max_ref, std::abs(numeric));
    }
    EXPECT_LT(max_err / max_ref, 2e-2) << op.name << " input " << i << ": max abs error " << max_err
                                       << " against max |grad| " << max_ref;
  }
}

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (Device d : available_devices()) {
    for (const OpCase& op : op_cases()) out.push_back({op, d});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOps, GradcheckTest, testing::ValuesIn(all_params()), param_name);

// Gradients that cross devices come back to the device of their input.
TEST(GradcheckCrossDevice, ToAndCatSendGradientsHome) {
  const Device h0 = Device::parse("host:0"), h1 = Device::parse("host:1");
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}, h0).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>{5, 6}, {1, 2}, h1).requires_grad_();
  Tensor y = ops::cat({ops::to(a, h1), b}, 0);  // on host:1
  EXPECT_EQ(y.device(), h1);
  backward(ops::sum(ops::mul(y, y)));
  EXPECT_EQ(a.grad().device(), h0);
  EXPECT_EQ(b.grad().device(), h1);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{10, 12}));
}

}  // namespace
}  // namespace dpe
