// concat: tensors from several devices joined along a dim on one device, in order, contiguous;
// the errors name the calling op.
#include "engine/tensor/concat.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

const Device kHost0 = Device::parse("host:0");
const Device kHost1 = Device::parse("host:1");

std::string error_of(const std::vector<Tensor>& xs, int64_t dim) {
  try {
    concat("gather", xs, dim, &kHost0);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ConcatTest, JoinsAlongEachDimOnTheDeviceAsked) {
  const Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}, kHost0);
  const Tensor b = Tensor::from_vector(std::vector<float>{5, 6}, {1, 2}, kHost1);
  const Tensor rows = concat("cat", {a, b}, 0, &kHost1);
  EXPECT_EQ(rows.device(), kHost1);
  EXPECT_EQ(rows.shape(), Shape({3, 2}));
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const Tensor c = Tensor::from_vector(std::vector<float>{7, 8}, {2, 1}, kHost1);
  const Tensor cols = concat("cat", {a, c}, -1, nullptr);  // on the first tensor's device
  EXPECT_EQ(cols.device(), kHost0);
  EXPECT_TRUE(cols.is_contiguous());
  EXPECT_EQ(cols.shape(), Shape({2, 3}));
  EXPECT_EQ(cols.to_vector<float>(), (std::vector<float>{1, 2, 7, 3, 4, 8}));
}

TEST(ConcatTest, ErrorsNameTheOp) {
  const Tensor a = Tensor::zeros({2, 2}), b = Tensor::zeros({2, 3}), v = Tensor::zeros({4});
  EXPECT_EQ(error_of({}, 0), "gather: expected a non-empty list of tensors");
  EXPECT_EQ(error_of({a, v}, 0),
            "gather: tensor 1 torch.Size([4]) does not match tensor 0 "
            "torch.Size([2, 2])");
  EXPECT_EQ(error_of({a, b}, 0),
            "gather: sizes of tensors must match except in dimension 0: tensor 0 is "
            "torch.Size([2, 2]), tensor 1 is torch.Size([2, 3])");
  EXPECT_EQ(concat("cat", {a, b}, 1, nullptr).shape(), Shape({2, 5}));
}

}  // namespace
}  // namespace dpe
