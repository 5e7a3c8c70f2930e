// Generator: a seedable source of random numbers, one per use site (no global RNG), and the
// initialisers PyTorch uses by default for Linear and Conv2d.
//
// Design note "seed replay": a module that needs randomness in its forward (Dropout, gpt's
// attention dropout) draws one seed per forward through draw_seed(). Activation checkpointing
// (engine/nn/checkpoint.h) runs a forward twice, and the second run must draw the same masks
// (PyTorch's preserve_rng_state=True): while a SeedRecording is active on a thread, every seed that
// thread draws is appended to its log; while a SeedReplay is active, draw_seed() returns the
// logged seeds in order and leaves the generators untouched, so the seeds later forwards draw
// are the same as without checkpointing.
//
// Threading contract: a Generator is not synchronised: one thread at a time (Dropout shares one
// behind a mutex). The initialisers draw from the generator they are given. Recording and replay
// are per thread; their scopes nest and restore what was active before them.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "engine/tensor/tensor.h"

namespace dpe {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  void manual_seed(uint64_t seed) { engine_.seed(seed); }
  float uniform(float low, float high);
  float normal(float mean, float stddev);
  uint64_t next_u64() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

// Values drawn on the host, then placed on `device`.
Tensor rand_uniform(const Shape& shape, float low, float high, Generator& gen, Device device = {});
Tensor randn(const Shape& shape, Generator& gen, Device device = {});
// PyTorch's default for Linear/Conv weights: kaiming_uniform_(a=sqrt(5)), i.e.
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias uses the same bound.
Tensor kaiming_uniform(const Shape& shape, int64_t fan_in, Generator& gen, Device device = {});
// A random permutation of 0..n-1 (Fisher-Yates).
std::vector<int64_t> randperm(int64_t n, Generator& gen);

// Design note "seed replay". Returns the next replayed seed when a SeedReplay is active on this
// thread (without calling `draw`), else draw(); appends the result to the active recording.
// Throws dpe::Error when a replay has no seed left (the recomputed forward draws more often).
uint64_t draw_seed(const std::function<uint64_t()>& draw);

// Appends every seed this thread draws through draw_seed() to `log` for the scope's lifetime.
class SeedRecording {
 public:
  explicit SeedRecording(std::vector<uint64_t>& log);
  ~SeedRecording();
  SeedRecording(const SeedRecording&) = delete;
  SeedRecording& operator=(const SeedRecording&) = delete;

 private:
  std::vector<uint64_t>* previous_;
};

// Serves `log`'s seeds, in order, to this thread's draw_seed() calls for the scope's lifetime.
class SeedReplay {
 public:
  explicit SeedReplay(const std::vector<uint64_t>& log);
  ~SeedReplay();
  SeedReplay(const SeedReplay&) = delete;
  SeedReplay& operator=(const SeedReplay&) = delete;
  // Seeds of the log not drawn yet (nonzero after a recompute: it drew fewer than recorded).
  size_t remaining() const { return log_.size() - next_; }

 private:
  friend uint64_t draw_seed(const std::function<uint64_t()>& draw);
  const std::vector<uint64_t>& log_;
  size_t next_ = 0;
  SeedReplay* previous_;
};

}  // namespace dpe
