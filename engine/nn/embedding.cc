#include "engine/nn/embedding.h"

#include "engine/autograd/ops.h"

namespace dpe::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen, Device device)
    : num_(num_embeddings), dim_(embedding_dim) {
  register_parameter("weight", randn({num_, dim_}, gen, device));
}

Tensor Embedding::forward(const Tensor& index) { return ops::embedding(param("weight"), index); }

std::string Embedding::repr() const {
  return "Embedding(" + std::to_string(num_) + ", " + std::to_string(dim_) + ")";
}

}  // namespace dpe::nn
