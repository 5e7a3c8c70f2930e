#include "engine/tensor/shape.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"

namespace dpe {
namespace {

TEST(ShapeTest, NumelStridesAndPyTorchsPrinting) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.contiguous_strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(s.str(), "torch.Size([2, 3, 4])");
  EXPECT_EQ(Shape{}.numel(), 1);  // a scalar
  EXPECT_EQ(s.normalize_dim(-1), 2);
  EXPECT_THROW(s.normalize_dim(3), Error);
}

TEST(ShapeTest, ZeroSizesGiveNoElementsAndPyTorchsStrides) {
  EXPECT_EQ(Shape({2, 0, 3}).numel(), 0);
  // torch.empty(2, 0, 3).stride() == (3, 3, 1): a zero size counts as one.
  EXPECT_EQ(Shape({2, 0, 3}).contiguous_strides(), (std::vector<int64_t>{3, 3, 1}));
}

TEST(ShapeTest, SizesWhoseProductOverflowsAreRejectedNotUndefined) {
  // A zero size does not hide a product that overflows (2^62 * 3 * 0): numel() and
  // contiguous_strides() throw.
  const int64_t big = int64_t{1} << 62;
  for (const Shape& s : {Shape({big, 3, 0}), Shape({0, big, big}), Shape({big, big})}) {
    SCOPED_TRACE(s.str());
    EXPECT_THROW(s.numel(), Error);
    EXPECT_THROW(s.contiguous_strides(), Error);
  }
  EXPECT_EQ(Shape({big, 1, 0}).numel(), 0);  // large but representable
  EXPECT_THROW(Shape({-1, 2}).numel(), Error);
}

}  // namespace
}  // namespace dpe
