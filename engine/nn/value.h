// Value: what flows into and out of a module's forward when it is more than one tensor — a tensor,
// a list, a dict of named values, or a plain scalar/string (passed unchanged to every replica by
// DataParallel's scatter, as PyTorch passes non-tensor arguments).
//
// Threading contract: a Value is an ordinary value type; reading one from several threads is safe,
// as for the Tensor handles it holds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/core/error.h"
#include "engine/tensor/tensor.h"

namespace dpe {

class Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // ordered, like a Python dict

class Value {
 public:
  Value() = default;
  Value(Tensor t) : v_(std::move(t)) {}  // NOLINT: implicit on purpose
  Value(double d) : v_(d) {}             // NOLINT
  Value(int64_t i) : v_(i) {}            // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}  // NOLINT
  Value(bool b) : v_(b) {}               // NOLINT
  Value(std::string s) : v_(std::move(s)) {}  // NOLINT
  Value(const char* s) : v_(std::string(s)) {}  // NOLINT
  Value(ValueList l) : v_(std::move(l)) {}  // NOLINT
  Value(ValueDict d) : v_(std::move(d)) {}  // NOLINT

  bool is_tensor() const { return std::holds_alternative<Tensor>(v_); }
  bool is_list() const { return std::holds_alternative<ValueList>(v_); }
  bool is_dict() const { return std::holds_alternative<ValueDict>(v_); }

  const Tensor& tensor() const {
    DPE_CHECK(is_tensor(), "expected a tensor value, got " << kind());
    return std::get<Tensor>(v_);
  }
  const ValueList& list() const {
    DPE_CHECK(is_list(), "expected a list value, got " << kind());
    return std::get<ValueList>(v_);
  }
  const ValueDict& dict() const {
    DPE_CHECK(is_dict(), "expected a dict value, got " << kind());
    return std::get<ValueDict>(v_);
  }
  template <typename T>
  const T& get() const {
    DPE_CHECK(std::holds_alternative<T>(v_), "value holds " << kind());
    return std::get<T>(v_);
  }
  // The dict entry `key`; throws naming the key when absent.
  const Value& at(const std::string& key) const {
    for (const auto& [k, v] : dict()) {
      if (k == key) return v;
    }
    DPE_THROW("no entry '" << key << "' in the dict value");
  }
  // Calls fn on every tensor inside this value, depth first, in list order and dict insertion
  // order: the order every walker over a Value (scatter, gather, DDP) agrees on.
  void for_each_tensor(const std::function<void(const Tensor&)>& fn) const {
    if (is_tensor()) {
      fn(tensor());
    } else if (is_list()) {
      for (const Value& e : list()) e.for_each_tensor(fn);
    } else if (is_dict()) {
      for (const auto& [k, e] : dict()) e.for_each_tensor(fn);
    }
  }
  // The same structure with every tensor replaced by fn(tensor), visited in for_each_tensor's
  // order; non-tensor values are kept.
  Value map_tensors(const std::function<Value(const Tensor&)>& fn) const {
    if (is_tensor()) return fn(tensor());
    if (is_list()) {
      ValueList out;
      for (const Value& e : list()) out.push_back(e.map_tensors(fn));
      return out;
    }
    if (is_dict()) {
      ValueDict out;
      for (const auto& [k, e] : dict()) out.emplace_back(k, e.map_tensors(fn));
      return out;
    }
    return *this;
  }
  const char* kind() const {
    static const char* names[] = {"none", "tensor", "float", "int", "bool", "string", "list",
                                  "dict"};
    return names[v_.index()];
  }

 private:
  std::variant<std::monostate, Tensor, double, int64_t, bool, std::string, ValueList, ValueDict>
      v_;
};

}  // namespace dpe
