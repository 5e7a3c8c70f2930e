// RandomSampler: a permutation of 0..n-1 per epoch, PyTorch 1.13's RandomSampler (without
// replacement) over a generator seeded once, bit for bit: epoch e is pass e of
//   g = torch.Generator(); g.manual_seed(seed)
//   sampler = RandomSampler(range(n), generator=g)   # Order::kSampler
//   for epoch in ...: for i in sampler: ...           # each pass iterated to its end
// or, with Order::kDataLoader, of torch.utils.data.DataLoader(data, shuffle=True, generator=g),
// which draws its workers' base seed (one int64, two 32-bit outputs) from g before each pass.
// torch's passes share one generator, and 1.13's __iter__ draws a second, unused randperm(n) when
// a pass ends, so pass e starts after e * (2 (n - 1) [+ 2]) 32-bit outputs (design note "torch
// order" in torch_generator.h); set_epoch() picks the pass, in any order, so a resumed run sees
// the same order as an uninterrupted one. tests/engine/data/golden/ holds torch's lists.
//
// What it does not match: PyTorch without a generator. RandomSampler(data) (and
// DataLoader(data, shuffle=True) with no generator=) makes each pass's generator afresh: it draws
// seed = torch.empty((), dtype=torch.int64).random_().item() from the global default generator
// (that torch.manual_seed(s) seeds) and shuffles with torch.Generator().manual_seed(seed);
// DataLoader's iterator draws its workers' base seed from the global generator too, first. Those
// seeds depend on every draw the script made from the global generator before each pass: weight
// initialisation (nn.Linear's kaiming_uniform_), dropout, torch.rand/randn of data, earlier
// passes. dpe owns no such process-wide stream, so it cannot reproduce them: with
// torch.manual_seed(s) alone, PyTorch's order is another permutation than dpe's, each epoch a
// different one. dpe's order equals PyTorch's bit for bit only with an explicit generator
// seeded once with the same seed: RandomSampler(data, generator=g) (Order::kSampler) or
// DataLoader(data, shuffle=True, generator=g) (Order::kDataLoader), g = torch.Generator() after
// g.manual_seed(seed), and every pass iterated to its end.
//
// Threading contract: not thread-safe (set_epoch writes, indices() updates a cache of the
// generator); see sampler.h.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/data/sampler.h"
#include "engine/data/torch_generator.h"

namespace dpe {

class RandomSampler : public Sampler {
 public:
  // Whose passes the epochs reproduce (see above).
  enum class Order { kSampler, kDataLoader };

  // n: the dataset size. Throws dpe::Error when negative.
  explicit RandomSampler(int64_t n, uint64_t seed = 0, Order order = Order::kSampler);

  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() const override;
  // Throws dpe::Error when epoch < 0.
  void set_epoch(int64_t epoch) override;
  int64_t epoch() const { return epoch_; }

 private:
  // The 32-bit outputs one pass takes before its permutation, and in all.
  uint64_t draws_before_permutation() const;
  uint64_t draws_per_pass() const;

  int64_t n_;
  uint64_t seed_;
  Order order_;
  int64_t epoch_ = 0;
  // The generator as pass `cached_pass_` starts: the next epoch costs one pass of draws, not all.
  mutable TorchGenerator cached_gen_;
  mutable int64_t cached_pass_ = 0;
};

}  // namespace dpe
