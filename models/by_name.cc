#include "models/by_name.h"

#include "engine/core/error.h"
#include "models/convnet.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "models/resnet.h"
#include "models/toy_model.h"

namespace dpe::models {

bool is_language_model(const std::string& name) { return name == "gpt-small" || name == "gpt2"; }

std::shared_ptr<Module> make_model(const std::string& name, Generator& gen,
                                   const ModelOptions& options) {
  if (name == "toy") return std::make_shared<ToyModel>(gen);
  if (name == "mlp") return std::make_shared<Mlp>(gen);
  if (name == "convnet") return std::make_shared<ConvNet>(gen);
  if (name == "resnet50" || name == "resnet-tiny") {
    DPE_CHECK(options.in_channels >= 0,
              "model " << name << ": in_channels " << options.in_channels << " is negative");
    ResNetConfig config = resnet_config(name);
    if (options.in_channels > 0) config.in_channels = options.in_channels;
    return std::make_shared<ResNet>(config, gen);
  }
  if (is_language_model(name)) {
    DPE_CHECK(options.vocab_size >= 0,
              "model " << name << ": vocabulary size " << options.vocab_size << " is negative");
    GptConfig config = gpt_config(name);
    if (options.vocab_size > 0) config.vocab_size = options.vocab_size;
    return std::make_shared<Gpt>(config, gen);
  }
  DPE_THROW("unknown model '"
            << name << "' (expected toy, mlp, convnet, resnet50, resnet-tiny, gpt-small or gpt2)");
}

}  // namespace dpe::models
