#include "engine/nn/module.h"

#include <map>
#include <set>
#include <sstream>

#include "engine/core/error.h"

namespace dpe {

namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

Tensor Module::forward(const Tensor&) {
  DPE_THROW(repr() << " takes structured input: call forward_value");
}

Value Module::forward_value(const Value& input) {
  if (input.is_list() && input.list().size() == 1) return forward(input.list()[0].tensor());
  DPE_CHECK(input.is_tensor(), repr() << ".forward expects one tensor, got a " << input.kind());
  return forward(input.tensor());
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  DPE_CHECK(name.find('.') == std::string::npos, "parameter name can't contain \".\": " << name);
  if (t.defined()) {
    t.requires_grad_(requires_grad);
    t.autograd().name = name;
    t.set_memory_category(MemoryCategory::kParameters);
  }
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  DPE_CHECK(name.find('.') == std::string::npos, "buffer name can't contain \".\": " << name);
  if (t.defined()) t.set_memory_category(MemoryCategory::kParameters);
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

Tensor& Module::param(const std::string& name) {
  for (auto& [n, t] : params_) {
    if (n == name) return t;
  }
  DPE_THROW(repr() << " has no parameter '" << name << "'");
}

const Tensor& Module::param(const std::string& name) const {
  return const_cast<Module*>(this)->param(name);
}

Tensor& Module::buffer(const std::string& name) {
  for (auto& [n, t] : buffers_) {
    if (n == name) return t;
  }
  DPE_THROW(repr() << " has no buffer '" << name << "'");
}

Module& Module::child(const std::string& name) const {
  if (const Module* w = wrapped()) return w->child(name);
  for (const auto& [n, m] : children_) {
    if (n == name) return *m;
  }
  DPE_THROW(repr() << " has no child module '" << name << "'");
}

namespace {

void append_defined(const Named& own, Named& out) {
  for (const auto& [name, t] : own) {
    if (t.defined()) out.emplace_back(name, t);
  }
}

}  // namespace

Named Module::named_parameters(bool recurse) const {
  if (const Module* w = wrapped()) return w->named_parameters(recurse);
  Named out;
  append_defined(params_, out);
  if (recurse) {
    for (const auto& [name, child] : children_) {
      for (auto& [n, t] : child->named_parameters(true)) out.emplace_back(join(name, n), t);
    }
  }
  return out;
}

Named Module::named_buffers(bool recurse) const {
  if (const Module* w = wrapped()) return w->named_buffers(recurse);
  Named out;
  append_defined(buffers_, out);
  if (recurse) {
    for (const auto& [name, child] : children_) {
      for (auto& [n, t] : child->named_buffers(true)) out.emplace_back(join(name, n), t);
    }
  }
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

namespace {

// Splits "a.b.c" into the module path "a.b" and the leaf "c".
std::pair<std::string, std::string> split_last(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return {"", name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

}  // namespace

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  DPE_CHECK(module != nullptr, repr() << ".replace_module('" << name << "'): the module is null");
  for (auto& [n, m] : children_) {
    if (n == name) {
      m = std::move(module);
      return;
    }
  }
  DPE_THROW(repr() << " has no child module '" << name << "'");
}

void Module::set_parameter(const std::string& name, const Tensor& t) {
  if (Module* w = wrapped()) return w->set_parameter(name, t);
  const auto [path, leaf] = split_last(name);
  if (!path.empty()) {
    const auto dot = path.find('.');
    Module& c = child(path.substr(0, dot));
    c.set_parameter(dot == std::string::npos ? leaf : path.substr(dot + 1) + "." + leaf, t);
    return;
  }
  param(leaf) = t;
}

void Module::set_buffer(const std::string& name, const Tensor& t) {
  if (Module* w = wrapped()) return w->set_buffer(name, t);
  const auto [path, leaf] = split_last(name);
  if (!path.empty()) {
    const auto dot = path.find('.');
    Module& c = child(path.substr(0, dot));
    c.set_buffer(dot == std::string::npos ? leaf : path.substr(dot + 1) + "." + leaf, t);
    return;
  }
  buffer(leaf) = t;
}

Tensor Module::find(const std::string& name) const {
  for (auto& [n, t] : named_parameters()) {
    if (n == name) return t;
  }
  for (auto& [n, t] : named_buffers()) {
    if (n == name) return t;
  }
  DPE_THROW(repr() << " has no parameter or buffer '" << name << "'");
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.set_grad(Tensor());
}

StateDict Module::state_dict() const {
  // PyTorch's order: a module's own parameters, then its own buffers, then each child's.
  if (const Module* w = wrapped()) return w->state_dict();
  StateDict out;
  append_defined(params_, out);
  append_defined(buffers_, out);
  for (const auto& [name, child] : children_) {
    for (auto& [n, t] : child->state_dict()) out.emplace_back(join(name, n), t);
  }
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  const StateDict own = state_dict();
  std::map<std::string, Tensor> given;
  std::vector<std::string> unexpected, missing, mismatched;
  for (const auto& [n, t] : state) given[n] = t;
  std::set<std::string> known, buffers;
  for (const auto& [n, t] : named_buffers()) buffers.insert(n);
  // PyTorch's BatchNorm loads state_dicts older than its num_batches_tracked buffer: a missing
  // one is no error, even when strict, and the buffer keeps its value.
  auto tolerated = [&buffers](const std::string& n) {
    const std::string leaf = "num_batches_tracked";
    return buffers.count(n) && n.size() >= leaf.size() &&
           n.compare(n.size() - leaf.size(), leaf.size(), leaf) == 0 &&
           (n.size() == leaf.size() || n[n.size() - leaf.size() - 1] == '.');
  };
  for (const auto& [n, t] : own) {
    known.insert(n);
    auto it = given.find(n);
    if (it == given.end()) {
      if (!tolerated(n)) missing.push_back(n);
    } else if (it->second.shape() != t.shape() || it->second.dtype() != t.dtype()) {
      std::ostringstream os;
      os << "size mismatch for " << n << ": copying a param with shape " << it->second.shape()
         << " (" << dtype_name(it->second.dtype()) << ") from checkpoint, the shape in current model is "
         << t.shape() << " (" << dtype_name(t.dtype()) << ").";
      mismatched.push_back(os.str());
    }
  }
  for (const auto& [n, t] : state) {
    if (!known.count(n)) unexpected.push_back(n);
  }
  std::ostringstream err;
  auto list = [&err](const char* what, const std::vector<std::string>& keys) {
    err << "\n\t" << what << " key(s) in state_dict: ";
    for (size_t i = 0; i < keys.size(); ++i) err << (i ? ", " : "") << '"' << keys[i] << '"';
    err << ".";
  };
  if (strict && !missing.empty()) list("Missing", missing);
  if (strict && !unexpected.empty()) list("Unexpected", unexpected);
  for (const auto& m : mismatched) err << "\n\t" << m;
  DPE_CHECK(err.str().empty(),
            "Error(s) in loading state_dict for " << repr() << ":" << err.str());
  for (const auto& [n, t] : own) {
    auto it = given.find(n);
    if (it == given.end()) continue;
    Tensor dst = t;
    dst.copy_(it->second);
  }
}

void Module::clone_children_from(const Module& other) {
  children_.clear();
  for (const auto& [n, c] : other.children_) children_.emplace_back(n, c->clone_structure());
}

std::shared_ptr<Module> Module::copy_to(Device device) const {
  MemoryCategoryScope category(MemoryCategory::kParameters);  // the copy's own parameters
  std::shared_ptr<Module> copy = clone_structure();
  for (const auto& [n, t] : named_parameters()) {
    Tensor p = t.to(device);
    p = p.is_same(t) ? t.clone() : p;
    p.requires_grad_(t.requires_grad());
    p.autograd().name = t.autograd().name;
    copy->set_parameter(n, p);
  }
  for (const auto& [n, t] : named_buffers()) {
    Tensor b = t.to(device);
    copy->set_buffer(n, b.is_same(t) ? t.clone() : b);
  }
  return copy;
}

Device Module::device() const {
  for (const auto& [n, t] : named_parameters()) return t.device();
  for (const auto& [n, t] : named_buffers()) return t.device();
  return Device();
}

void Module::to(Device device) {
  for (auto& [n, t] : params_) {
    if (!t.defined() || t.device() == device) continue;
    Tensor moved = t.to(device);
    moved.set_memory_category(MemoryCategory::kParameters);
    moved.requires_grad_(t.requires_grad());
    moved.autograd().name = t.autograd().name;
    t = moved;
  }
  for (auto& [n, t] : buffers_) {
    if (t.defined() && t.device() != device) {
      t = t.to(device);
      t.set_memory_category(MemoryCategory::kParameters);
    }
  }
  for (auto& [n, c] : children_) c->to(device);
}

void Module::to(DType dtype) {
  DPE_CHECK(is_floating_point(dtype), "Module.to: nn.Module.to only accepts floating point "
                                      "dtypes, got "
                                          << dtype_name(dtype));
  for (auto& [n, t] : params_) {
    if (!t.defined() || !is_floating_point(t.dtype()) || t.dtype() == dtype) continue;
    Tensor converted = t.to(dtype);
    converted.set_memory_category(MemoryCategory::kParameters);
    converted.requires_grad_(t.requires_grad());
    converted.autograd().name = t.autograd().name;
    t = converted;
  }
  for (auto& [n, t] : buffers_) {
    if (t.defined() && is_floating_point(t.dtype()) && t.dtype() != dtype) {
      t = t.to(dtype);
      t.set_memory_category(MemoryCategory::kParameters);
    }
  }
  for (auto& [n, c] : children_) c->to(dtype);
}

}  // namespace dpe
