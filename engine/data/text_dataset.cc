#include "engine/data/text_dataset.h"

#include <cmath>
#include <cstring>

#include "engine/core/error.h"

namespace dpe {

namespace {

Tensor host_tokens(const Tensor& tokens, const char* what) {
  DPE_CHECK(tokens.defined(), what << ": the token tensor is undefined");
  DPE_CHECK(tokens.dtype() == DType::kInt64 && tokens.dim() == 1,
            what << ": expected int64 tokens of shape [N], got " << dtype_name(tokens.dtype())
                 << " " << tokens.shape());
  return tokens.device().is_host() ? tokens.contiguous() : tokens.to(Device());
}

std::vector<int64_t> counts_of(const Tensor& tokens, int64_t vocab_size, const char* which) {
  std::vector<int64_t> counts(vocab_size, 0);
  const int64_t* ids = tokens.data<int64_t>();
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    DPE_CHECK(ids[i] >= 0 && ids[i] < vocab_size, "unigram_perplexity: " << which << " token "
                                                      << i << " is " << ids[i]
                                                      << ", outside the vocabulary of "
                                                      << vocab_size);
    ++counts[ids[i]];
  }
  return counts;
}

}  // namespace

TextDataset::TextDataset(const Tensor& tokens, int64_t context, int64_t stride)
    : tokens_(host_tokens(tokens, "TextDataset")),
      context_(context),
      stride_(stride == 0 ? context : stride) {
  DPE_CHECK(context_ > 0 && stride_ > 0, "TextDataset: context and stride must be positive, got "
                                             << context_ << " and " << stride_);
  DPE_CHECK(tokens_.numel() >= context_ + 1,
            "TextDataset: " << tokens_.numel() << " tokens cannot fill one window of context "
                            << context_ << " and its target (" << context_ + 1 << " tokens)");
}

int64_t TextDataset::size() const { return (tokens_.numel() - context_ - 1) / stride_ + 1; }

Example TextDataset::get(int64_t index) const {
  check_index("TextDataset", index);
  Example e;
  e.input = tokens_.narrow(0, index * stride_, context_);
  e.target = tokens_.narrow(0, index * stride_ + 1, context_);
  return e;
}

Batch TextDataset::get_batch(const std::vector<int64_t>& indices) const {
  DPE_CHECK(!indices.empty(), "TextDataset::get_batch: empty list of indices");
  const int64_t b = static_cast<int64_t>(indices.size());
  Batch batch;
  batch.input = Tensor::empty(Shape{b, context_}, DType::kInt64);
  batch.target = Tensor::empty(Shape{b, context_}, DType::kInt64);
  const int64_t* src = tokens_.data<int64_t>();
  int64_t* input = batch.input.data<int64_t>();
  int64_t* target = batch.target.data<int64_t>();
  const size_t row = static_cast<size_t>(context_) * sizeof(int64_t);
  for (int64_t i = 0; i < b; ++i) {
    check_index("TextDataset::get_batch", indices[i]);
    const int64_t start = indices[i] * stride_;
    std::memcpy(input + i * context_, src + start, row);
    std::memcpy(target + i * context_, src + start + 1, row);
  }
  return batch;
}

double unigram_perplexity(const Tensor& train_tokens, const Tensor& eval_tokens, int64_t vocab_size,
                          double smoothing) {
  DPE_CHECK(vocab_size > 0, "unigram_perplexity: vocab_size must be positive, got " << vocab_size);
  DPE_CHECK(smoothing >= 0, "unigram_perplexity: smoothing must be >= 0, got " << smoothing);
  const Tensor train = host_tokens(train_tokens, "unigram_perplexity (train)");
  const Tensor eval = host_tokens(eval_tokens, "unigram_perplexity (eval)");
  DPE_CHECK(train.numel() > 0 && eval.numel() > 0, "unigram_perplexity: empty token stream ("
                                                       << train.numel() << " train, "
                                                       << eval.numel() << " eval tokens)");
  const std::vector<int64_t> train_counts = counts_of(train, vocab_size, "train");
  const std::vector<int64_t> eval_counts = counts_of(eval, vocab_size, "eval");
  const double denominator = static_cast<double>(train.numel()) + smoothing * vocab_size;
  double nll = 0;  // summed per vocabulary entry: one log per distinct token, not per token
  for (int64_t v = 0; v < vocab_size; ++v) {
    if (eval_counts[v] == 0) continue;
    const double p = (static_cast<double>(train_counts[v]) + smoothing) / denominator;
    DPE_CHECK(p > 0, "unigram_perplexity: token " << v
                                                  << " never occurs in training and smoothing is 0");
    nll -= static_cast<double>(eval_counts[v]) * std::log(p);
  }
  return std::exp(nll / static_cast<double>(eval.numel()));
}

}  // namespace dpe
