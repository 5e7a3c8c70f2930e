// TextDataset: (input, target) windows over a token stream for a language model, and the
// unigram baseline its perplexity is compared with.
//
// Sample i is input = tokens[i*stride, i*stride + context) and target = the same window shifted
// by one, tokens[i*stride + 1, i*stride + context + 1): position t's target is the token after
// its input. Both are int64 [context]; get_batch gives int64 [B, context] for each.
//
// Threading contract: immutable after construction; every method may be called from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/data/dataset.h"

namespace dpe {

class TextDataset : public Dataset {
 public:
  // `tokens`: int64 [N] on host (copied to a contiguous host tensor when it is not). `stride`
  // defaults to `context` (windows that do not overlap). Throws dpe::Error when the stream is
  // too short for one window (N < context + 1) or context/stride are not positive.
  TextDataset(const Tensor& tokens, int64_t context, int64_t stride = 0);

  // Windows whose target fits: (N - context - 1) / stride + 1.
  int64_t size() const override;
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;

 private:
  Tensor tokens_;
  int64_t context_;
  int64_t stride_;
};

// The perplexity of `eval_tokens` under the unigram distribution of `train_tokens`:
// exp(-mean over eval tokens of log p(token)), p(v) = (count_train(v) + smoothing) /
// (N_train + smoothing * vocab_size). Additive smoothing (1 by default, Laplace) keeps a token
// never seen in training from making the baseline infinite. The baseline a language model must
// beat: a model that ignores context cannot do better than the training distribution.
// Throws dpe::Error on an empty stream, a non-int64 tensor or an id outside [0, vocab_size).
double unigram_perplexity(const Tensor& train_tokens, const Tensor& eval_tokens, int64_t vocab_size,
                          double smoothing = 1.0);

}  // namespace dpe
