#include "engine/tensor/random.h"

#include <cmath>
#include <numeric>

#include "engine/core/error.h"

namespace dpe {

float Generator::uniform(float low, float high) {
  // 24 random bits give every float in [0, 1) with equal spacing, independent of libstdc++.
  const float u = static_cast<float>(engine_() >> 40) * (1.0f / 16777216.0f);
  return low + (high - low) * u;
}

float Generator::normal(float mean, float stddev) {
  // Box-Muller on two uniforms in (0, 1].
  const double u1 = (static_cast<double>(engine_() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  return mean + stddev * static_cast<float>(z);
}

Tensor rand_uniform(const Shape& shape, float low, float high, Generator& gen, Device device) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = gen.uniform(low, high);
  return Tensor::from_vector(v, shape, device);
}

Tensor randn(const Shape& shape, Generator& gen, Device device) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = gen.normal(0.0f, 1.0f);
  return Tensor::from_vector(v, shape, device);
}

Tensor kaiming_uniform(const Shape& shape, int64_t fan_in, Generator& gen, Device device) {
  DPE_CHECK(fan_in > 0, "kaiming_uniform: fan_in must be positive, got " << fan_in);
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  return rand_uniform(shape, -bound, bound, gen, device);
}

std::vector<int64_t> randperm(int64_t n, Generator& gen) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

namespace {
thread_local std::vector<uint64_t>* t_recording = nullptr;
thread_local SeedReplay* t_replay = nullptr;
}  // namespace

uint64_t draw_seed(const std::function<uint64_t()>& draw) {
  uint64_t seed;
  if (t_replay != nullptr) {
    DPE_CHECK(t_replay->next_ < t_replay->log_.size(),
              "seed replay: the recomputed forward draws more random seeds than the recorded one ("
                  << t_replay->log_.size()
                  << "); a checkpointed module must draw the same randomness on each run");
    seed = t_replay->log_[t_replay->next_++];
  } else {
    seed = draw();
  }
  if (t_recording != nullptr) t_recording->push_back(seed);
  return seed;
}

SeedRecording::SeedRecording(std::vector<uint64_t>& log) : previous_(t_recording) {
  t_recording = &log;
}
SeedRecording::~SeedRecording() { t_recording = previous_; }

SeedReplay::SeedReplay(const std::vector<uint64_t>& log) : log_(log), previous_(t_replay) {
  t_replay = this;
}
SeedReplay::~SeedReplay() { t_replay = previous_; }

}  // namespace dpe
