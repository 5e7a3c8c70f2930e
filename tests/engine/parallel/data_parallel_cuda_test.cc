// DataParallel on CUDA devices against one CUDA device: the host equivalence test, run where GPUs
// exist, on 2 devices and on 4 where there are 4. One GPU presents 4 devices with
// DPE_CUDA_LOGICAL_DEVICES=4 (engine/backend/cuda/cuda_devices.cc), as the GPU bundle runs it.
// Without two devices it skips and says why.
#include <gtest/gtest.h>

#include "engine/device/runtime.h"
#include "models/convnet.h"
#include "models/mlp.h"
#include "models/toy_model.h"
#include "tests/engine/parallel/equivalence.h"

namespace dpe {
namespace {

#define REQUIRE_TWO_GPUS(gpus)                                                        \
  if ((gpus).size() < 2) {                                                            \
    GTEST_SKIP() << "no CUDA devices to run on: DataParallel on CUDA needs 2, found " \
                 << (gpus).size();                                                    \
  }

TEST(DataParallelCudaTest, ToyModelMlpAndConvNetMatchOneGpu) {
  const std::vector<Device> all = Runtime::get().devices(DeviceType::kCuda);
  REQUIRE_TWO_GPUS(all);
  for (const size_t n : {size_t{2}, size_t{4}}) {
    if (all.size() < n) continue;
    const std::vector<Device> gpus(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
    SCOPED_TRACE(std::to_string(n) + " CUDA devices");
    test::check_equivalence(
        [] {
          Generator g(1);
          return std::make_shared<models::ToyModel>(g);
        },
        Shape{10}, 5, 30, gpus);
    test::check_equivalence(
        [] {
          Generator g(2);
          return std::make_shared<models::Mlp>(g);
        },
        Shape{1, 28, 28}, 10, 17, gpus);
    test::check_equivalence(
        [] {
          Generator g(3);
          return std::make_shared<models::ConvNet>(g, false);
        },
        Shape{1, 28, 28}, 10, 10, gpus);
  }
}

}  // namespace
}  // namespace dpe
