#include "engine/data/dataset.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

// Sample i: input [2, 2] filled with i, target the scalar label i % 3 (or none), built per call
// so get_batch uses the default stacking.
class ToyDataset : public Dataset {
 public:
  explicit ToyDataset(int64_t n, bool with_target = true, int64_t odd_shape_at = -1)
      : n_(n), with_target_(with_target), odd_shape_at_(odd_shape_at) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override {
    check_index("ToyDataset", index);
    Example e;
    const Shape shape = index == odd_shape_at_ ? Shape{3} : Shape{2, 2};
    e.input = Tensor::full(shape, static_cast<float>(index));
    if (with_target_) e.target = Tensor::from_vector(std::vector<int64_t>{index % 3}, Shape{});
    return e;
  }

 private:
  int64_t n_;
  bool with_target_;
  int64_t odd_shape_at_;
};

TEST(DatasetTest, DefaultGetBatchStacksAlongDimZero) {
  ToyDataset data(6);
  const Batch b = data.get_batch({4, 0, 5});
  EXPECT_EQ(b.input.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(b.input.device(), Device());
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{4, 4, 4, 4, 0, 0, 0, 0, 5, 5, 5, 5}));
  EXPECT_EQ(b.target.shape(), (Shape{3}));
  EXPECT_EQ(b.target.dtype(), DType::kInt64);
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 2}));
}

TEST(DatasetTest, NoTargetGivesAnUndefinedTarget) {
  ToyDataset data(3, /*with_target=*/false);
  const Batch b = data.get_batch({2, 1});
  EXPECT_EQ(b.input.shape(), (Shape{2, 2, 2}));
  EXPECT_FALSE(b.target.defined());
}

TEST(DatasetTest, GetBatchErrors) {
  ToyDataset data(4, true, /*odd_shape_at=*/3);
  EXPECT_THROW(data.get_batch({}), Error);
  try {
    data.get_batch({0, 7});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "ToyDataset: index 7 is out of range for a dataset of size 4");
  }
  try {
    data.get_batch({0, 3});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("torch.Size([3]) at entry 1"), std::string::npos)
        << e.what();
  }
}

TEST(DatasetTest, StackCopiesFromOtherDevicesToHostZero) {
  if (Runtime::get().device_count(DeviceType::kHost) < 2) GTEST_SKIP() << "needs host:1";
  const Tensor a = Tensor::from_vector(std::vector<float>{1, 2}, Shape{2}, Device::parse("host:1"));
  const Tensor b = Tensor::from_vector(std::vector<float>{3, 4}, Shape{2});
  const Tensor s = stack_on_host({a, b}, "test");
  EXPECT_EQ(s.device(), Device());
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  // A strided view stacks by value.
  const Tensor m = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  const Tensor t = m.permute({1, 0});
  EXPECT_EQ(stack_on_host({t}, "test").to_vector<float>(), (std::vector<float>{1, 3, 2, 4}));
}

}  // namespace
}  // namespace dpe
