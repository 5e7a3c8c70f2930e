#include "engine/distributed/fully_sharded_data_parallel.h"

#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include "engine/autograd/grad_mode.h"
#include "engine/backend/dispatch.h"
#include "engine/device/device_guard.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/device/memory_category.h"
#include "engine/distributed/broadcast_packed.h"
#include "engine/distributed/distributed.h"
#include "engine/distributed/verify_params.h"
#include "engine/optim/clip_grad.h"
#include "engine/optim/optimizer.h"

namespace dpe {
namespace distributed {

// One parameter of a unit: where it lies in the flat buffer and which parameter of the unwrapped
// module it is.
struct FsdpSlot {
  std::string name;  // the unwrapped module's name ("h.0.attn.c_attn.weight")
  size_t index = 0;  // in the unwrapped module's parameters()
  Shape shape;
  int64_t offset = 0, numel = 0;
  Tensor view;  // the leaf the module computes with: a view of the gathered buffer
  bool arrived = false;  // its gradient reached the flat gradient in this backward
};

struct FsdpUnit {
  std::string name;  // "" for the root
  std::vector<FsdpSlot> slots;
  int64_t shard = 0;   // elements each rank keeps
  int64_t padded = 0;  // shard * world
  Tensor flat_param;   // this rank's shard: the optimizer's parameter
  Tensor gathered;     // [padded], released between uses
  Tensor flat_grad;    // [padded] while a backward runs
  size_t arrived = 0;
};

struct FsdpState {
  std::shared_ptr<ProcessGroup> group;
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  std::shared_ptr<Module> module;
  Device device;
  std::vector<std::unique_ptr<FsdpUnit>> units;  // the root first
  std::vector<std::pair<std::string, Shape>> state_names;  // the unwrapped state_dict's
  std::vector<std::pair<std::string, Tensor>> buffers;
  std::vector<std::pair<size_t, size_t>> slot_of;  // parameter index -> (unit, slot)

  void gather(FsdpUnit& u) {
    if (!u.gathered.impl()->storage->released()) return;
    u.gathered.impl()->storage->rematerialize();
    group->all_gather_into_tensor(u.gathered, u.flat_param.detach());
  }
  void release(FsdpUnit& u) { u.gathered.impl()->storage->release(); }

  // A unit whose last backward delivered only some of its gradients was never reduced: the
  // ranks would wait for each other's reduce-scatter forever, so say which parameters missed.
  void check_reduced(const FsdpUnit& u) const {
    if (u.arrived == 0) return;
    std::ostringstream missing;
    int shown = 0;
    for (const FsdpSlot& s : u.slots) {
      if (!s.arrived && shown++ < 8) missing << (shown > 1 ? ", " : "") << s.name;
    }
    DPE_THROW("FullyShardedDataParallel (rank "
              << group->rank() << "): unit '" << (u.name.empty() ? "<root>" : u.name)
              << "' received gradients for " << u.arrived << " of its " << u.slots.size()
              << " parameters in the last backward, so its gradients were never reduced "
                 "(no gradient: "
              << missing.str()
              << "). Every parameter of a unit must take part in the loss; unused parameters "
                 "are not supported");
  }

  void on_gradient(size_t unit, size_t slot, Tensor& leaf) {
    FsdpUnit& u = *units[unit];
    FsdpSlot& s = u.slots[slot];
    const Tensor g = leaf.grad();
    leaf.set_grad(Tensor());
    if (!g.defined()) return;
    if (!u.flat_grad.defined()) {
      MemoryCategoryScope category(MemoryCategory::kCommunication);
      u.flat_grad = Tensor::zeros(Shape{u.padded}, DType::kFloat32, device);
    }
    Tensor into = u.flat_grad.narrow(0, s.offset, s.numel).view(s.shape);
    if (s.arrived) {  // a second gradient in the same backward (a re-entrant graph): add it
      NoGradGuard no_grad;
      into.copy_(ops::add(into, g));
      return;
    }
    into.copy_(g);
    s.arrived = true;
    if (++u.arrived < u.slots.size()) return;
    Tensor reduced;
    {
      MemoryCategoryScope category(MemoryCategory::kGradients);
      reduced = Tensor::empty(Shape{u.shard}, DType::kFloat32, device);
    }
    group->reduce_scatter_tensor(reduced, u.flat_grad, ReduceOp::kAvg);
    u.flat_grad = Tensor();
    u.arrived = 0;
    for (FsdpSlot& each : u.slots) each.arrived = false;
    const Tensor before = u.flat_param.grad();
    if (before.defined()) {
      NoGradGuard no_grad;
      before.detach().copy_(ops::add(before, reduced));
    } else {
      u.flat_param.set_grad(reduced);
    }
    release(u);
  }

  // A non-root unit's forward: gather, run, and (FULL_SHARD) free again with a node on the
  // output that gathers when backward reaches the unit.
  Tensor run_unit(size_t unit, const std::function<Tensor()>& forward) {
    FsdpUnit& u = *units[unit];
    check_reduced(u);
    gather(u);
    Tensor out = forward();
    if (!grad_enabled() || !out.requires_grad()) {
      release(u);
      return out;
    }
    if (strategy != ShardingStrategy::kFullShard) return out;
    release(u);
    Tensor y = out.detach();
    record("FsdpPreBackward", {out}, {&y}, [this, unit](const std::vector<Tensor>& grads) {
      gather(*units[unit]);
      return std::vector<Tensor>{grads[0]};
    });
    return y;
  }
};

namespace {

// Stands in for a wrapped submodule in its parent: its forward gathers the unit's parameters.
class FsdpUnitModule : public Cloneable<FsdpUnitModule> {
 public:
  FsdpUnitModule(FsdpState* state, size_t unit, std::shared_ptr<Module> inner)
      : state_(state), unit_(unit) {
    register_module("_fsdp_wrapped_module", std::move(inner));
  }
  Tensor forward(const Tensor& x) override {
    return state_->run_unit(unit_, [&] { return wrapped()->forward(x); });
  }
  std::string repr() const override {
    return "FullyShardedDataParallel(" + wrapped()->repr() + ")";
  }
  // Names look through the unit, as they do through a checkpoint wrapper (module.h); child()
  // does too, so the one child is reached directly.
  Module* wrapped() const override { return named_children().at(0).second.get(); }

 private:
  FsdpState* state_;  // owned by the FullyShardedDataParallel that owns this module's tree
  size_t unit_;
};

// The outermost submodules the policy picks, by dotted name, in registration order. A wrapper
// (an activation-checkpointing one) is picked when the module it wraps is, so the unit holds
// the wrapper and its parameters' names are the unwrapped ones.
void find_units(const Module& m, const std::string& prefix,
                const std::function<bool(const Module&)>& policy, std::vector<std::string>& out) {
  for (const auto& [name, child] : m.named_children()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    if (policy(*child) || (child->wrapped() != nullptr && policy(*child->wrapped()))) {
      out.push_back(full);
    } else {
      find_units(*child, full, policy, out);
    }
  }
}

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Every parameter and buffer on the module's one device; every parameter float32 and requiring
// grad.
void check_module(const Module& module, const NamedTensors& params, const Device& device) {
  for (const auto& tensors : {params, module.named_buffers()}) {
    for (const auto& [name, t] : tensors) {
      DPE_CHECK(t.device() == device,
                "FullyShardedDataParallel: module must have its parameters and buffers on one "
                "device, "
                    << device << ", but found " << name << " on device: " << t.device());
    }
  }
  for (const auto& [name, t] : params) {
    DPE_CHECK(t.requires_grad() && t.dtype() == DType::kFloat32,
              "FullyShardedDataParallel: parameter " << name << " is " << t.str()
                                                     << (t.requires_grad() ? "" : " not requiring grad")
                                                     << "; every parameter must be a float32 "
                                                        "tensor that requires grad");
  }
}

// The same parameters on every rank, then rank 0's values of them and of the buffers everywhere.
void synchronize_initial_state(ProcessGroup& group, const Module& module,
                               const NamedTensors& params, const Device& device) {
  verify_params_across_processes(group, params, device);
  std::vector<Tensor> initial;
  for (const auto& [n, t] : params) initial.push_back(t);
  for (const auto& [n, t] : module.named_buffers()) initial.push_back(t);
  if (!initial.empty()) broadcast_packed(group, initial, 0);
}

// The units (the root first, then one per prefix) and each parameter's slot in the innermost unit
// whose prefix names it, in the order of the module's parameters.
void assign_slots(FsdpState& st, const NamedTensors& params,
                  const std::vector<std::string>& prefixes) {
  st.units.push_back(std::make_unique<FsdpUnit>());
  for (const std::string& p : prefixes) {
    st.units.push_back(std::make_unique<FsdpUnit>());
    st.units.back()->name = p;
  }
  st.slot_of.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, t] = params[i];
    size_t unit = 0;
    for (size_t k = 1; k < st.units.size(); ++k) {
      if (name.rfind(st.units[k]->name + ".", 0) == 0) unit = k;
    }
    FsdpUnit& u = *st.units[unit];
    FsdpSlot s;
    s.name = name;
    s.index = i;
    s.shape = t.shape();
    s.numel = t.numel();
    s.offset = u.slots.empty() ? 0 : u.slots.back().offset + u.slots.back().numel;
    st.slot_of[i] = {unit, u.slots.size()};
    u.slots.push_back(std::move(s));
  }
}

// Unit k's gathered buffer, padded to a multiple of the world, holding the parameters' values;
// the module computes with views of it, whose gradients reach the unit through on_gradient.
void build_gathered_buffer(FsdpState& st, size_t k, const NamedTensors& params, int world) {
  FsdpUnit& u = *st.units[k];
  const int64_t total = u.slots.empty() ? 0 : u.slots.back().offset + u.slots.back().numel;
  u.shard = (total + world - 1) / world;
  u.padded = u.shard * world;
  {
    // SHARD_GRAD_OP holds the whole model's parameters from forward to the end of backward, as
    // ZeRO-2's unsharded parameters; FULL_SHARD holds a unit's while it runs, a transient buffer
    // ZeRO-3's formula leaves out.
    MemoryCategoryScope category(st.strategy == ShardingStrategy::kShardGradOp
                                     ? MemoryCategory::kParameters
                                     : MemoryCategory::kCommunication);
    u.gathered = Tensor::zeros(Shape{u.padded}, DType::kFloat32, st.device);
  }
  for (size_t j = 0; j < u.slots.size(); ++j) {
    FsdpSlot& s = u.slots[j];
    Tensor view = u.gathered.narrow(0, s.offset, s.numel).view(s.shape);
    view.copy_(params[s.index].second.detach());
    view.requires_grad_(true);
    view.autograd().name = s.name;
    view.autograd().grad_category = MemoryCategory::kCommunication;  // copied on at once
    FsdpState* raw = &st;
    view.autograd().post_accumulate_hooks.emplace_back(
        [raw, k, j](Tensor& leaf) { raw->on_gradient(k, j, leaf); });
    s.view = view;
    st.module->set_parameter(s.name, view);
  }
}

// Each non-root unit's submodule replaced in its parent by an FsdpUnitModule around it.
void wrap_units(FsdpState& st) {
  for (size_t k = 1; k < st.units.size(); ++k) {
    const std::string& name = st.units[k]->name;
    const size_t dot = name.rfind('.');
    Module* parent = st.module.get();
    if (dot != std::string::npos) {
      std::string path = name.substr(0, dot);
      size_t at = 0;
      while (at <= path.size()) {
        const size_t next = std::min(path.find('.', at), path.size());
        parent = &parent->child(path.substr(at, next - at));
        at = next + 1;
      }
    }
    const std::string last = dot == std::string::npos ? name : name.substr(dot + 1);
    std::shared_ptr<Module> inner;
    for (const auto& [n, c] : parent->named_children()) {
      if (n == last) inner = c;
    }
    parent->replace_module(last, std::make_shared<FsdpUnitModule>(&st, k, inner));
  }
}

}  // namespace
}  // namespace distributed

using distributed::FsdpSlot;
using distributed::FsdpState;
using distributed::FsdpUnit;

const char* sharding_strategy_name(ShardingStrategy s) {
  return s == ShardingStrategy::kFullShard ? "FULL_SHARD" : "SHARD_GRAD_OP";
}

FullyShardedDataParallel::FullyShardedDataParallel(
    std::shared_ptr<Module> module, std::shared_ptr<distributed::ProcessGroup> process_group,
    FullyShardedDataParallelOptions options)
    : state_(std::make_shared<FsdpState>()) {
  DPE_CHECK(module != nullptr, "FullyShardedDataParallel: the module is null");
  FsdpState& st = *state_;
  st.group = process_group ? std::move(process_group) : distributed::default_group();
  st.strategy = options.sharding_strategy;
  st.module = module;
  st.device = module->device();
  const auto params = module->named_parameters();
  distributed::check_module(*module, params, st.device);
  distributed::synchronize_initial_state(*st.group, *module, params, st.device);
  for (const auto& [name, t] : module->state_dict()) st.state_names.emplace_back(name, t.shape());
  st.buffers = module->named_buffers();

  std::vector<std::string> prefixes;
  if (options.auto_wrap_policy) distributed::find_units(*module, "", options.auto_wrap_policy, prefixes);
  distributed::assign_slots(st, params, prefixes);
  const int world = st.group->size();
  const int rank = st.group->rank();
  for (size_t k = 0; k < st.units.size(); ++k) {
    FsdpUnit& u = *st.units[k];
    distributed::build_gathered_buffer(st, k, params, world);
    u.flat_param = register_parameter("flat_param_" + std::to_string(k),
                                      u.gathered.narrow(0, rank * u.shard, u.shard).clone());
    st.release(u);
  }
  // Wrap last, so the names above still walk the unwrapped tree.
  distributed::wrap_units(st);
}

Module& FullyShardedDataParallel::module() const { return *state_->module; }

ShardingStrategy FullyShardedDataParallel::sharding_strategy() const { return state_->strategy; }

std::vector<std::string> FullyShardedDataParallel::unit_names() const {
  std::vector<std::string> out;
  for (const auto& u : state_->units) out.push_back(u->name);
  return out;
}

Value FullyShardedDataParallel::forward_value(const Value& input) {
  FsdpState& st = *state_;
  st.module->train(is_training());
  FsdpUnit& root = *st.units[0];
  st.check_reduced(root);
  st.gather(root);
  Value out = st.module->forward_value(input);
  // The root's parameters are needed again as soon as backward starts (PyTorch keeps them too);
  // without a backward to come they go now.
  if (!grad_enabled()) st.release(root);
  return out;
}

Tensor FullyShardedDataParallel::forward(const Tensor& x) {
  return forward_value(Value(x.device() == state_->device ? x : x.to(state_->device))).tensor();
}

std::string FullyShardedDataParallel::repr() const {
  return std::string("FullyShardedDataParallel(sharding_strategy=") +
         sharding_strategy_name(state_->strategy) + ", units=" +
         std::to_string(state_->units.size()) + ")(\n  " + state_->module->repr() + "\n)";
}

float FullyShardedDataParallel::clip_grad_norm_(float max_norm) {
  DPE_CHECK(max_norm >= 0.0f, "clip_grad_norm_: max_norm must be >= 0, got " << max_norm);
  FsdpState& st = *state_;
  const std::vector<Tensor> flat = parameters();
  const float local = optim::clip_grad_norm_(flat, std::numeric_limits<float>::infinity());
  Tensor squares = Tensor::from_vector(std::vector<float>{local * local}, Shape{1}, st.device);
  st.group->all_reduce(squares);
  const double total = std::sqrt(static_cast<double>(squares.item()));
  const double coef = static_cast<double>(max_norm) / (total + 1e-6);
  if (coef < 1.0) {
    // Scaled where they are: a shard-sized temporary would count as model state.
    for (const Tensor& p : flat) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      DeviceGuard guard(&g.context());
      dispatch(prim::Scale{g, static_cast<float>(coef), g});
      g.bump_version();
    }
  }
  return static_cast<float>(total);
}

StateDict FullyShardedDataParallel::full_state_dict() const {
  FsdpState& st = *state_;
  std::map<std::string, Tensor> values;
  for (const auto& u : st.units) {
    Tensor all = Tensor::empty(Shape{u->padded}, DType::kFloat32, st.device);
    st.group->all_gather_into_tensor(all, u->flat_param.detach());
    for (const FsdpSlot& s : u->slots) values[s.name] = all.narrow(0, s.offset, s.numel).view(s.shape);
  }
  for (const auto& [name, t] : st.buffers) values[name] = t.clone();
  StateDict out;
  for (const auto& [name, shape] : st.state_names) out.emplace_back(name, values.at(name));
  return out;
}

void FullyShardedDataParallel::load_full_state_dict(const StateDict& state) {
  FsdpState& st = *state_;
  std::map<std::string, Tensor> given(state.begin(), state.end());
  std::ostringstream problems;
  for (const auto& [name, shape] : st.state_names) {
    const auto it = given.find(name);
    if (it == given.end()) {
      problems << "\n  missing key: " << name;
    } else if (!it->second.defined() || it->second.shape() != shape) {
      problems << "\n  " << name << ": " << it->second.str() << ", expected shape " << shape;
    }
  }
  for (const auto& [name, t] : state) {
    bool known = false;
    for (const auto& [n, s] : st.state_names) known = known || n == name;
    if (!known) problems << "\n  unexpected key: " << name;
  }
  DPE_CHECK(problems.str().empty(),
            "FullyShardedDataParallel.load_full_state_dict: the state dict is not the module's:"
                << problems.str());
  const int rank = st.group->rank();
  for (const auto& u : st.units) {
    Tensor flat = Tensor::zeros(Shape{u->padded}, DType::kFloat32, st.device);
    for (const FsdpSlot& s : u->slots) {
      flat.narrow(0, s.offset, s.numel).view(s.shape).copy_(given.at(s.name));
    }
    u->flat_param.detach().copy_(flat.narrow(0, rank * u->shard, u->shard));
    st.release(*u);  // a gathered copy would hold the old values
  }
  for (const auto& [name, t] : st.buffers) t.detach().copy_(given.at(name));
}

StateDict FullyShardedDataParallel::full_optim_state_dict(const StateDict& sharded) const {
  FsdpState& st = *state_;
  std::vector<std::vector<std::pair<std::string, Tensor>>> fields(st.units.size());
  for (const auto& [key, t] : sharded) {
    const auto [k, field] = optim::parse_state_key("FullyShardedDataParallel.full_optim_state_dict",
                                                   key, st.units.size(), "flat parameter");
    fields[k].emplace_back(field, t);
  }
  std::vector<std::vector<std::pair<std::string, Tensor>>> per_param(st.slot_of.size());
  for (size_t k = 0; k < st.units.size(); ++k) {
    const FsdpUnit& u = *st.units[k];
    for (const auto& [field, t] : fields[k]) {
      if (t.defined() && t.dtype() == DType::kFloat32 && t.numel() == u.shard) {
        Tensor all = Tensor::empty(Shape{u.padded}, DType::kFloat32, st.device);
        st.group->all_gather_into_tensor(all, t.to(st.device).contiguous());
        for (const FsdpSlot& s : u.slots) {
          per_param[s.index].emplace_back(field, all.narrow(0, s.offset, s.numel).view(s.shape));
        }
      } else {  // a per-parameter scalar, such as Adam's step: every parameter of the unit has it
        for (const FsdpSlot& s : u.slots) per_param[s.index].emplace_back(field, t.clone());
      }
    }
  }
  StateDict out;
  for (size_t i = 0; i < per_param.size(); ++i) {
    for (const auto& [field, t] : per_param[i]) {
      out.emplace_back("state." + std::to_string(i) + "." + field, t);
    }
  }
  return out;
}

StateDict FullyShardedDataParallel::shard_optim_state_dict(const StateDict& full) const {
  const FsdpState& st = *state_;
  // unit -> field -> the parameters' entries, in the unit's slot order
  std::vector<std::map<std::string, std::vector<std::pair<size_t, Tensor>>>> fields(
      st.units.size());
  for (const auto& [key, t] : full) {
    const auto [i, field] = optim::parse_state_key(
        "FullyShardedDataParallel.shard_optim_state_dict", key, st.slot_of.size());
    const auto [k, j] = st.slot_of[i];
    fields[k][field].emplace_back(j, t);
  }
  const int rank = st.group->rank();
  StateDict out;
  for (size_t k = 0; k < st.units.size(); ++k) {
    const FsdpUnit& u = *st.units[k];
    for (const auto& [field, entries] : fields[k]) {
      const std::string key = "state." + std::to_string(k) + "." + field;
      const Tensor& first = entries.front().second;
      if (first.defined() && first.dtype() == DType::kFloat32 &&
          first.shape() == u.slots[entries.front().first].shape) {
        Tensor flat = Tensor::zeros(Shape{u.padded}, DType::kFloat32, st.device);
        for (const auto& [j, t] : entries) {
          const FsdpSlot& s = u.slots[j];
          DPE_CHECK(t.defined() && t.dtype() == DType::kFloat32 && t.shape() == s.shape,
                    "FullyShardedDataParallel: optimizer state 'state."
                        << s.index << "." << field << "' is " << t.str()
                        << ", expected float32 of parameter " << s.name << "'s shape " << s.shape);
          flat.narrow(0, s.offset, s.numel).view(s.shape).copy_(t);
        }
        out.emplace_back(key, flat.narrow(0, rank * u.shard, u.shard).clone());
      } else {
        out.emplace_back(key, first);
      }
    }
  }
  return out;
}

}  // namespace dpe
