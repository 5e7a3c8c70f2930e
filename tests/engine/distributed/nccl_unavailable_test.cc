// Without a GPU, NcclProcessGroup cannot be created and its error names the device. Runs
// everywhere a GPU is not.
#include "engine/distributed/nccl_process_group.h"

#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe::distributed {
namespace {

const Device kCuda0 = Device::parse("cuda:0");

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(NcclProcessGroupTest, WithoutAGpuTheGroupCannotBeCreatedAndSaysWhy) {
  if (Runtime::get().device_count(DeviceType::kCuda) > 0)
    GTEST_SKIP() << "a CUDA device is present";
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  const std::string msg = error_of([&] { NcclProcessGroup pg(store, 0, 1, kCuda0); });
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dpe::distributed
