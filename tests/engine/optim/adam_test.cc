#include "engine/optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/core/error.h"
#include "tests/engine/optim/params.h"

namespace dpe::optim {
namespace {

using testing::param;
using testing::set_grad;

TEST(AdamTest, MatchesTorchFormulasForAdamAndAdamW) {
  for (bool decoupled : {false, true}) {
    Tensor p = param({0.5f});
    AdamOptions o;
    o.lr = 0.01f;
    o.weight_decay = 0.1f;
    AdamWOptions w;
    w.lr = o.lr;
    w.weight_decay = o.weight_decay;
    std::unique_ptr<Adam> made = decoupled ? std::make_unique<AdamW>(std::vector<Tensor>{p}, w)
                                           : std::make_unique<Adam>(std::vector<Tensor>{p}, o);
    Adam& adam = *made;
    double x = 0.5, m = 0, v = 0;
    const double grads[4] = {0.3, -0.1, 0.2, 0.05};
    for (int t = 1; t <= 4; ++t) {
      set_grad(p, {static_cast<float>(grads[t - 1])});
      adam.step();
      double g = grads[t - 1];
      if (decoupled)
        x *= 1 - 0.01 * 0.1;
      else
        g += 0.1 * x;
      m = 0.9 * m + 0.1 * g;
      v = 0.999 * v + 0.001 * g * g;
      const double mhat = m / (1 - std::pow(0.9, t));
      const double denom = std::sqrt(v / (1 - std::pow(0.999, t))) + 1e-8;
      x -= 0.01 * mhat / denom;
    }
    EXPECT_NEAR(p.to_vector<float>()[0], x, 1e-6) << "decoupled=" << decoupled;
  }
}

TEST(AdamTest, DefaultsArePyTorchs) {
  // torch.optim.Adam: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.
  const AdamOptions adam;
  EXPECT_EQ(adam.lr, 1e-3f);
  EXPECT_EQ(adam.beta1, 0.9);
  EXPECT_EQ(adam.beta2, 0.999);
  EXPECT_EQ(adam.eps, 1e-8f);
  EXPECT_EQ(adam.weight_decay, 0.0f);
  EXPECT_FALSE(adam.adamw);
  // torch.optim.AdamW: the same but weight_decay 0.01.
  const AdamWOptions adamw;
  EXPECT_EQ(adamw.lr, 1e-3f);
  EXPECT_EQ(adamw.beta1, 0.9);
  EXPECT_EQ(adamw.beta2, 0.999);
  EXPECT_EQ(adamw.eps, 1e-8f);
  EXPECT_EQ(adamw.weight_decay, 0.01f);
}

TEST(AdamTest, DefaultAdamWDecaysTheWeightsAsPyTorch) {
  // One step from x = 2 with g = 0.5: x *= 1 - 1e-3 * 0.01, then Adam's first step moves it by
  // lr * g / (|g| + eps) = 1e-3 (up to eps).
  Tensor p = param({2.0f});
  AdamW opt({p});
  set_grad(p, {0.5f});
  opt.step();
  const double want = 2.0 * (1 - 1e-3 * 0.01) - 1e-3 * 0.5 / (0.5 + 1e-8);
  EXPECT_NEAR(p.to_vector<float>()[0], want, 1e-7);
}

// The message of the dpe::Error `f` throws; a failure when it throws nothing or something else
// (std::stoul's std::invalid_argument once escaped as "train: stoul").
std::string load_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a dpe::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error";
  return "";
}

// `state` with `key` removed, or replaced by `value` when it is defined (added when absent).
StateDict with(StateDict state, const std::string& key, const Tensor& value = Tensor()) {
  bool found = false;
  for (auto it = state.begin(); it != state.end();) {
    if (it->first == key) {
      found = true;
      if (!value.defined()) {
        it = state.erase(it);
        continue;
      }
      it->second = value;
    }
    ++it;
  }
  if (!found && value.defined()) state.emplace_back(key, value);
  return state;
}

Tensor step_tensor(int64_t step) {
  return Tensor::from_vector(std::vector<int64_t>{step}, Shape{});
}

// load_state_dict checks every entry before it uses any, and each error names the key: the
// step is a whole number from 1 to 2^53 (0 failed at the next step with "adam_step: step counts
// from 1", INT64_MAX wrapped), present whenever the moments are (PyTorch's Adam fails at step()
// on a state without 'step'; this fails at load), an int64 scalar; the moments are float32 of
// the parameter's shape; the index is a parameter's. A refused state leaves the optimizer as it
// was.
TEST(AdamTest, LoadStateDictChecksEveryEntryAndNamesTheKey) {
  Tensor p = param({0.5f, -0.5f});
  AdamW adam({p});
  set_grad(p, {0.1f, 0.2f});
  adam.step();
  const StateDict good = adam.state_dict();
  const Tensor zeros2 = Tensor::zeros({2});
  const std::vector<std::pair<StateDict, std::string>> bad{
      {with(good, "state.0.step", step_tensor(0)), "'state.0.step' is 0"},
      {with(good, "state.0.step", step_tensor(-5)), "'state.0.step' is -5"},
      {with(good, "state.0.step", step_tensor(INT64_MAX)), "'state.0.step' is 9223372036854775807"},
      {with(good, "state.0.step"), "no 'state.0.step'"},
      {with(good, "state.0.exp_avg"), "no 'state.0.exp_avg'"},
      {with(good, "state.0.step", Tensor::from_vector(std::vector<float>{3.0f}, Shape{})),
       "'state.0.step'"},
      {with(good, "state.0.step", Tensor::from_vector(std::vector<int64_t>{1, 2}, Shape{2})),
       "'state.0.step'"},
      {with(good, "state.0.exp_avg", Tensor::zeros({3})), "'state.0.exp_avg'"},
      {with(good, "state.0.exp_avg",
            Tensor::from_vector(std::vector<int64_t>{0, 0}, Shape{2})),
       "'state.0.exp_avg'"},
      {with(good, "state.x.exp_avg", zeros2), "'state.x.exp_avg'"},
      {with(good, "state.99999999999999999999.step", step_tensor(1)),
       "'state.99999999999999999999.step'"},
      {with(good, "state.1.step", step_tensor(1)), "'state.1.step'"},
      {with(good, "state.0.momentum", zeros2), "'state.0.momentum'"},
  };
  for (const auto& [state, expected] : bad) {
    const std::string msg = load_error([&, &state = state] { adam.load_state_dict(state); });
    EXPECT_NE(msg.find(expected), std::string::npos) << expected << ": " << msg;
  }
  // Nothing of the refused states was taken: the next step is step 2 of the good state.
  Tensor q = param({0.5f, -0.5f});
  AdamW twin({q});
  twin.load_state_dict(good);
  q.copy_(p);
  set_grad(p, {0.3f, -0.1f});
  set_grad(q, {0.3f, -0.1f});
  adam.step();
  twin.step();
  EXPECT_EQ(p.to_vector<float>(), q.to_vector<float>());
  // A step count reaches 2^53 and stops there with an error naming the parameter; it never wraps.
  EXPECT_NO_THROW(
      twin.load_state_dict(with(good, "state.0.step", step_tensor((int64_t{1} << 53) - 1))));
  set_grad(q, {0.3f, -0.1f});
  EXPECT_NO_THROW(twin.step());
  EXPECT_EQ(twin.state_dict().back().second.to_vector<int64_t>()[0], int64_t{1} << 53);
  set_grad(q, {0.3f, -0.1f});
  EXPECT_NE(load_error([&] { twin.step(); }).find("parameter 0 has taken 9007199254740992 steps"),
            std::string::npos);
}

}  // namespace
}  // namespace dpe::optim
