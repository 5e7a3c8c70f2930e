#include "models/by_name.h"

#include "engine/core/error.h"
#include "models/convnet.h"
#include "models/mlp.h"
#include "models/toy_model.h"

namespace dpe::models {

std::shared_ptr<Module> make_model(const std::string& name, Generator& gen) {
  if (name == "toy") return std::make_shared<ToyModel>(gen);
  if (name == "mlp") return std::make_shared<Mlp>(gen);
  if (name == "convnet") return std::make_shared<ConvNet>(gen);
  DPE_THROW("unknown model '" << name << "' (expected toy, mlp or convnet)");
}

}  // namespace dpe::models
