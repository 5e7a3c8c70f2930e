#include "engine/optim/grad_scaler.h"

#include <cmath>
#include <string>

#include "engine/autograd/autocast.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/device/memory_category.h"
#include "engine/optim/gradient_scale.h"

namespace dpe::optim {

GradScaler::GradScaler(const GradScalerOptions& o) : options_(o), scale_(o.init_scale) {
  DPE_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0.0f,
            "GradScaler: init_scale must be finite and > 0, got " << o.init_scale);
  DPE_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1.0f,
            "GradScaler: growth_factor must be > 1, got " << o.growth_factor);
  DPE_CHECK(o.backoff_factor > 0.0f && o.backoff_factor < 1.0f,
            "GradScaler: backoff_factor must be in (0, 1), got " << o.backoff_factor);
  DPE_CHECK(o.growth_interval >= 1,
            "GradScaler: growth_interval must be >= 1, got " << o.growth_interval);
}

GradScaler::Record& GradScaler::record(const Optimizer& opt) {
  for (Record& r : records_) {
    if (r.opt == &opt) return r;
  }
  records_.push_back({&opt, Stage::kReady, false});
  return records_.back();
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  DPE_CHECK(loss.defined() && is_floating_point(loss.dtype()),
            "GradScaler.scale: the loss must be a floating tensor, got "
                << (loss.defined() ? dtype_name(loss.dtype()) : "an undefined tensor"));
  const AutocastState ac = autocast_state(loss.device().type());
  DPE_CHECK(!(ac.enabled && ac.dtype == DType::kBFloat16),
            "GradScaler.scale: autocast runs bfloat16 on "
                << loss.device()
                << ", which needs no loss scaling (its exponent range is float32's); "
                   "GradScaler is for float16");
  return ops::mul_scalar(loss, scale_);
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled) return;
  Record& r = record(opt);
  DPE_CHECK(r.stage != Stage::kUnscaled,
            "GradScaler.unscale_: already called on this optimizer since the last update()");
  DPE_CHECK(r.stage != Stage::kStepped, "GradScaler.unscale_: called after step()");
  // Checked first, so that a refused call changes no gradient.
  const std::vector<Tensor>& params = opt.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    DPE_CHECK(!g.defined() || g.dtype() == DType::kFloat32,
              "GradScaler.unscale_: parameter "
                  << i << "'s gradient is " << dtype_name(g.dtype())
                  << "; only float32 gradients are unscaled (float32 parameters under float16 "
                     "autocast, as PyTorch's)");
  }
  // 1 / scale in double, rounded once, as PyTorch's.
  const float inv = static_cast<float>(1.0 / static_cast<double>(scale_));
  MemoryCategoryScope scratch(MemoryCategory::kOther);
  bool found_inf = false;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    DeviceGuard guard(&g.context());
    // Every device's gradients are checked: a step is skipped if any saw an overflow.
    if (!ops::all_finite(g)) found_inf = true;
    scale_gradient_(g, inv);
  }
  r.found_inf = found_inf;
  r.stage = Stage::kUnscaled;
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  DPE_CHECK(record(opt).stage != Stage::kStepped,
            "GradScaler.step: already called on this optimizer since the last update()");
  if (record(opt).stage == Stage::kReady) unscale_(opt);
  Record& r = record(opt);
  r.stage = Stage::kStepped;
  if (r.found_inf) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  DPE_CHECK(!records_.empty(),
            "GradScaler.update: no inf checks were recorded before update() "
            "(call step() or unscale_() first)");
  bool found_inf = false;
  for (const Record& r : records_) found_inf = found_inf || r.found_inf;
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    // A scale that would overflow stays, as PyTorch's _amp_update_scale_.
    const float grown = scale_ * options_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
  records_.clear();
}

namespace {

Tensor scalar(float v) { return Tensor::from_vector(std::vector<float>{v}, Shape{}); }

}  // namespace

StateDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", scalar(scale_)},
          {"growth_factor", scalar(options_.growth_factor)},
          {"backoff_factor", scalar(options_.backoff_factor)},
          {"growth_interval",
           Tensor::from_vector(std::vector<int64_t>{options_.growth_interval}, Shape{})},
          {"_growth_tracker", Tensor::from_vector(std::vector<int64_t>{growth_tracker_}, Shape{})}};
}

void GradScaler::load_state_dict(const StateDict& state) {
  DPE_CHECK(options_.enabled || state.empty(),
            "GradScaler.load_state_dict: this scaler is disabled and takes no state");
  GradScalerOptions o = options_;
  float scale = scale_;
  int64_t tracker = growth_tracker_;
  bool have_scale = false;
  for (const auto& [name, t] : state) {
    const bool is_int = name == "growth_interval" || name == "_growth_tracker";
    DPE_CHECK(name == "scale" || name == "growth_factor" || name == "backoff_factor" || is_int,
              "GradScaler.load_state_dict: unexpected key '" << name << "'");
    const DType want = is_int ? DType::kInt64 : DType::kFloat32;
    DPE_CHECK(
        t.defined() && t.dtype() == want && t.numel() == 1,
        "GradScaler.load_state_dict: '" << name << "' is not a " << dtype_name(want) << " scalar");
    if (is_int) {
      (name == "growth_interval" ? o.growth_interval : tracker) = t.to_vector<int64_t>()[0];
    } else {
      const float v = t.item();
      if (name == "scale") {
        scale = v;
        have_scale = true;
      } else {
        (name == "growth_factor" ? o.growth_factor : o.backoff_factor) = v;
      }
    }
  }
  DPE_CHECK(have_scale || state.empty(), "GradScaler.load_state_dict: no 'scale'");
  o.init_scale = scale;
  GradScaler checked(o);  // the options' checks
  DPE_CHECK(tracker >= 0 && tracker < o.growth_interval,
            "GradScaler.load_state_dict: '_growth_tracker' is "
                << tracker << ", not in [0, growth_interval " << o.growth_interval << ")");
  options_ = o;
  scale_ = scale;
  growth_tracker_ = tracker;
}

}  // namespace dpe::optim
