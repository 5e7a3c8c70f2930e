#include "tools/train_lib/model_and_optimizer.h"

#include <utility>

#include "engine/core/error.h"
#include "engine/distributed/distributed.h"
#include "engine/distributed/fully_sharded_data_parallel.h"
#include "engine/distributed/zero_redundancy_optimizer.h"
#include "engine/optim/adam.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "engine/tensor/random.h"
#include "models/by_name.h"
#include "models/gpt.h"
#include "tools/common/activation_checkpointing.h"
#include "tools/common/devices.h"

namespace dpe::tools {

namespace {

std::unique_ptr<optim::Optimizer> make_plain_optimizer(const TrainConfig& c,
                                                       std::vector<Tensor> params, float lr) {
  if (c.optimizer == "adamw") {
    optim::AdamWOptions o;  // PyTorch's betas (0.9, 0.999) and eps 1e-8
    o.lr = lr;
    o.weight_decay = c.weight_decay;
    return std::make_unique<optim::AdamW>(std::move(params), o);
  }
  optim::SgdOptions so;
  so.lr = lr;
  so.momentum = c.momentum;
  so.weight_decay = c.weight_decay;
  return std::make_unique<optim::SGD>(std::move(params), so);
}

}  // namespace

std::shared_ptr<Module> build_model(const TrainConfig& c, const Data& data,
                                    const Distributed& dist) {
  Generator gen(c.seed);
  models::ModelOptions mo;
  mo.vocab_size = data.vocab_size;
  // The resnets are torchvision's, 3 channels; Fashion-MNIST's images [N, 1, 28, 28] have one.
  if (models::model_info(c.model).task == models::ModelTask::kImageClassification) {
    mo.in_channels = 1;
  }
  std::shared_ptr<Module> model = models::make_model(c.model, gen, mo);
  if (c.sync_bn) model = dist.convert_sync_batchnorm(model);
  if (c.activation_checkpointing) apply_activation_checkpointing_flag(c.model, *model);
  return model;
}

std::optional<Device> compute_device(const TrainConfig& c) {
  if (c.mode == "dp") return std::nullopt;
  if (c.device != "cuda") return Device();
  return Device(DeviceType::kCuda, ranked(c) ? distributed::get_local_rank() : 0);
}

std::shared_ptr<Module> wrap_for_mode(const TrainConfig& c, std::shared_ptr<Module> model,
                                      const Distributed& dist) {
  if (c.mode == "dp") {
    const std::vector<Device> devices = tool_devices(parse_device_type(c.device), c.devices);
    model->to(devices[0]);
    return std::make_shared<DataParallel>(model, devices);
  }
  model->to(*compute_device(c));
  if (c.mode == "ddp") return dist.wrap(model, c.gradient_as_bucket_view, "auto", c.ddp_comm_hook);
  if (c.mode == "fsdp") {
    DPE_CHECK(dist.group != nullptr,
              "--mode fsdp needs a process group (run under //tools:launch)");
    FullyShardedDataParallelOptions o;
    o.sharding_strategy =
        c.sharding == "full" ? ShardingStrategy::kFullShard : ShardingStrategy::kShardGradOp;
    o.auto_wrap_policy = models::is_gpt_block;
    return std::make_shared<FullyShardedDataParallel>(model, dist.group, o);
  }
  return model;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params,
                                                 float lr, const Distributed& dist) {
  if (!c.zero) return make_plain_optimizer(c, std::move(params), lr);
  return std::make_unique<distributed::ZeroRedundancyOptimizer>(
      std::move(params),
      [c, lr](std::vector<Tensor> shard) { return make_plain_optimizer(c, std::move(shard), lr); },
      dist.group);
}

}  // namespace dpe::tools
