#include "tools/common/precision.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"

namespace dpe::tools {
namespace {

TEST(PrecisionTest, EachNameAndItsAutocastDtype) {
  EXPECT_EQ(precision_names(), (std::vector<std::string>{"fp32", "bf16", "fp16"}));
  EXPECT_FALSE(autocast_dtype("fp32").has_value());
  EXPECT_EQ(autocast_dtype("bf16"), DType::kBFloat16);
  EXPECT_EQ(autocast_dtype("fp16"), DType::kFloat16);
  EXPECT_THROW(autocast_dtype("fp8"), Error);
  EXPECT_THROW(autocast_dtype("tf32"), Error);  // sim's GPU math, not an autocast dtype
  EXPECT_TRUE(needs_grad_scaler("fp16"));
  EXPECT_FALSE(needs_grad_scaler("bf16"));
  EXPECT_FALSE(needs_grad_scaler("fp32"));
}

TEST(PrecisionTest, AutocastForEnablesTheDtypeOrNothing) {
  {
    const autocast amp = autocast_for("fp16", DeviceType::kHost);
    EXPECT_TRUE(autocast_state(DeviceType::kHost).enabled);
    EXPECT_EQ(autocast_state(DeviceType::kHost).dtype, DType::kFloat16);
  }
  {
    const autocast amp = autocast_for("fp32", DeviceType::kHost);
    EXPECT_FALSE(autocast_state(DeviceType::kHost).enabled);
  }
  EXPECT_FALSE(autocast_state(DeviceType::kHost).enabled);
  EXPECT_THROW(autocast_for("int8", DeviceType::kHost), Error);
}

}  // namespace
}  // namespace dpe::tools
