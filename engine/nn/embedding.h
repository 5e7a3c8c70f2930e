// Embedding: a lookup table of num_embeddings rows of embedding_dim, PyTorch's nn.Embedding with
// its default initialisation (weight ~ N(0, 1)); forward takes int64 indices of any shape and
// returns [..., embedding_dim].
//
// Threading contract: as every Module (module.h): one thread at a time per instance.
#pragma once

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::nn {

class Embedding : public Cloneable<Embedding> {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen, Device device = {});
  Tensor forward(const Tensor& index) override;
  // "Embedding(50257, 768)", as PyTorch prints it.
  std::string repr() const override;
  const Tensor& weight() const { return param("weight"); }

 private:
  int64_t num_, dim_;
};

}  // namespace dpe::nn
