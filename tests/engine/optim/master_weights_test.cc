// 16-bit parameters: the optimizer's float32 master weights (optimizer.h).
#include <gtest/gtest.h>

#include <vector>

#include "engine/core/error.h"
#include "engine/core/low_precision.h"
#include "engine/optim/adam.h"
#include "engine/optim/sgd.h"
#include "tests/engine/optim/params.h"

namespace dpe::optim {
namespace {

using testing::param;
using testing::set_grad;

Tensor lowp_param(const std::vector<float>& v, DType dt) {
  Tensor p = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(dt);
  p.requires_grad_();
  return p;
}

// The float32 values rounded to dt and back, as the parameter must hold them.
std::vector<float> rounded(const Tensor& f32, DType dt) {
  return f32.to(dt).to(DType::kFloat32).to_vector<float>();
}

// Steps a float32 and a 16-bit copy of the same parameters with the same gradients: the master
// follows the float32 run exactly, and the parameter is its rounding, also where each update is
// below the 16-bit spacing (bfloat16 has 8 bits: 1.0's neighbour is 1.0078125).
template <class Opt, class Options>
void expect_master_follows_float32(DType dt, const Options& o) {
  const std::vector<float> init = {1.0f, -0.5f, 3.0f};
  Tensor ref = param(init);
  Tensor low = lowp_param(init, dt);
  Opt a({ref}, o), b({low}, o);
  const Optimizer& master = b;
  for (int step = 0; step < 12; ++step) {
    const std::vector<float> g = {1e-3f, -2e-3f, 0.5f + step};
    set_grad(ref, g);
    // The 16-bit parameter's gradient is 16-bit; the update reads it through float32.
    low.set_grad(Tensor::from_vector(g, {3}).to(dt));
    const std::vector<float> g16 = low.grad().to(DType::kFloat32).to_vector<float>();
    set_grad(ref, g16);
    a.step();
    b.step();
    ASSERT_EQ(low.dtype(), dt);
    EXPECT_EQ(master.master_weight(0).to_vector<float>(), ref.to_vector<float>())
        << "step " << step;
    EXPECT_EQ(low.to(DType::kFloat32).to_vector<float>(), rounded(ref, dt)) << "step " << step;
  }
  // The small updates added up in the master: bfloat16 alone would still hold 1.0.
  EXPECT_LT(master.master_weight(0).to_vector<float>()[0], 1.0f);
}

TEST(MasterWeightsTest, SgdWithMomentumOnBfloat16AndFloat16) {
  SgdOptions o;
  o.lr = 0.1f;
  o.momentum = 0.9f;
  o.weight_decay = 1e-4f;
  expect_master_follows_float32<SGD>(DType::kBFloat16, o);
  expect_master_follows_float32<SGD>(DType::kFloat16, o);
}

TEST(MasterWeightsTest, AdamWOnBfloat16AndFloat16) {
  AdamWOptions o;
  o.lr = 1e-3f;
  expect_master_follows_float32<AdamW>(DType::kBFloat16, o);
  expect_master_follows_float32<AdamW>(DType::kFloat16, o);
}

TEST(MasterWeightsTest, AParameterWrittenBetweenStepsIsTakenAgain) {
  Tensor p = lowp_param({1.0f, 2.0f}, DType::kBFloat16);
  SGD opt({p}, SgdOptions{0.5f});
  set_grad(p, {1.0f, 1.0f});
  p.set_grad(p.grad().to(DType::kBFloat16));
  opt.step();
  EXPECT_EQ(p.to(DType::kFloat32).to_vector<float>(), (std::vector<float>{0.5f, 1.5f}));
  // A checkpoint loaded into the model: the next step starts from it, not from the old master.
  p.copy_(Tensor::from_vector(std::vector<float>{4.0f, 8.0f}, {2}));
  EXPECT_EQ(opt.master_weight(0).to_vector<float>(), (std::vector<float>{4.0f, 8.0f}));
  opt.step();
  EXPECT_EQ(p.to(DType::kFloat32).to_vector<float>(), (std::vector<float>{3.5f, 7.5f}));
}

TEST(MasterWeightsTest, LoadMasterWeightKeepsTheExactValue) {
  Tensor p = lowp_param({0.0f}, DType::kBFloat16);
  Tensor f = param({0.0f});
  SGD opt({p, f}, SgdOptions{0.0f});
  const Tensor v = Tensor::from_vector(std::vector<float>{1.001f}, {1});
  opt.load_master_weight(0, v);
  opt.load_master_weight(1, v);
  EXPECT_EQ(opt.master_weight(0).to_vector<float>(), (std::vector<float>{1.001f}));
  EXPECT_EQ(p.to(DType::kFloat32).to_vector<float>(), (std::vector<float>{1.0f}));
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.001f}));
  EXPECT_EQ(opt.master_weight(1).to_vector<float>(), (std::vector<float>{1.001f}));
  EXPECT_THROW(opt.load_master_weight(0, v.to(DType::kBFloat16)), Error);
  EXPECT_THROW(opt.load_master_weight(0, Tensor::zeros({2})), Error);
  EXPECT_THROW(opt.load_master_weight(2, v), Error);
  EXPECT_EQ(opt.master_weight(0).to_vector<float>(), (std::vector<float>{1.001f}));
}

TEST(MasterWeightsTest, TheMasterIsOptimizerState) {
  Tensor p = lowp_param(std::vector<float>(1024, 1.0f), DType::kBFloat16);
  SGD opt({p}, SgdOptions{0.1f});
  p.set_grad(Tensor::ones({1024}).to(DType::kBFloat16));
  opt.step();
  EXPECT_EQ(opt.master_weight(0).memory_category(), MemoryCategory::kOptimizerState);
  EXPECT_EQ(opt.master_weight(0).dtype(), DType::kFloat32);
}

TEST(MasterWeightsTest, RefusesANonFloatingParameter) {
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{1, 2}, {2});
  try {
    SGD opt({idx}, SgdOptions{0.1f});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 0 is int64"), std::string::npos);
  }
}

}  // namespace
}  // namespace dpe::optim
