#include "engine/nn/sequential.h"

namespace dpe::nn {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers) {
  for (auto& l : layers) push_back(std::move(l));
}

void Sequential::push_back(std::shared_ptr<Module> layer) {
  register_module(std::to_string(size()), std::move(layer));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [name, layer] : named_children()) h = layer->forward(h);
  return h;
}

std::string Sequential::repr() const {
  std::string out = "Sequential(";
  for (const auto& [name, layer] : named_children()) out += "\n  (" + name + "): " + layer->repr();
  return out + (size() ? "\n)" : ")");
}

}  // namespace dpe::nn
