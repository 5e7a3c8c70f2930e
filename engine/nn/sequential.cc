#include "engine/nn/sequential.h"

#include "engine/nn/fusion.h"

namespace dpe::nn {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers) {
  for (auto& l : layers) push_back(std::move(l));
}

void Sequential::push_back(std::shared_ptr<Module> layer) {
  register_module(std::to_string(size()), std::move(layer));
}

Tensor Sequential::forward(const Tensor& x) {
  const auto& layers = named_children();
  Tensor h = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    Module& layer = *layers[i].second;
    if (i + 2 < layers.size() &&
        fuses_batch_norm_relu_max_pool(layer, *layers[i + 1].second, *layers[i + 2].second)) {
      // As below, with the pooling after them.
      h = forward_batch_norm_relu_max_pool(layer, *layers[i + 1].second, *layers[i + 2].second, h);
      i += 2;
    } else if (i + 1 < layers.size() && fuses_batch_norm_relu(layer, *layers[i + 1].second)) {
      // Unfused where forward_batch_norm_relu decides so: the same two forwards.
      h = forward_batch_norm_relu(layer, *layers[++i].second, h);
    } else {
      h = layer.forward(h);
    }
  }
  return h;
}

std::string Sequential::repr() const {
  std::string out = "Sequential(";
  for (const auto& [name, layer] : named_children()) out += "\n  (" + name + "): " + layer->repr();
  return out + (size() ? "\n)" : ")");
}

}  // namespace dpe::nn
