#include "kernels/host/copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/core/error.h"

namespace dpe::host {
namespace {

TEST(StridedCopyTest, TransposedViewGathersInRowMajorOrder) {
  // A 2x3 row-major matrix viewed transposed: sizes {3, 2}, strides {1, 3}.
  const std::vector<float> src = {0, 1, 2, 3, 4, 5};
  std::vector<float> dst(6, -1);
  const int64_t sizes[] = {3, 2}, strides[] = {1, 3};
  strided_copy(dst.data(), src.data(), sizeof(float), 2, sizes, strides);
  EXPECT_EQ(dst, (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(StridedCopyTest, EveryElementWidthAndABroadcastStride) {
  // Stride 0 repeats an element (an expanded view); offsets start at src.
  const std::vector<int64_t> src64 = {7, 8, 9};
  std::vector<int64_t> dst64(6);
  const int64_t sizes[] = {2, 3}, strides[] = {0, 1};
  strided_copy(dst64.data(), src64.data(), 8, 2, sizes, strides);
  EXPECT_EQ(dst64, (std::vector<int64_t>{7, 8, 9, 7, 8, 9}));

  const std::vector<uint16_t> src16 = {1, 2, 3, 4};
  std::vector<uint16_t> dst16(2);
  const int64_t every_other[] = {2};
  strided_copy(dst16.data(), src16.data() + 1, 2, 1, sizes, every_other);
  EXPECT_EQ(dst16, (std::vector<uint16_t>{2, 4}));

  const std::vector<uint8_t> src8 = {1, 2, 3};
  std::vector<uint8_t> dst8(3);
  const int64_t three[] = {3}, unit[] = {1};
  strided_copy(dst8.data(), src8.data(), 1, 1, three, unit);
  EXPECT_EQ(dst8, src8);
}

TEST(StridedCopyTest, ZeroSizedViewWritesNothingAndBadWidthThrows) {
  std::vector<float> dst = {42};
  const int64_t sizes[] = {0, 4}, strides[] = {4, 1};
  strided_copy(dst.data(), nullptr, sizeof(float), 2, sizes, strides);
  EXPECT_EQ(dst[0], 42);
  EXPECT_THROW(strided_copy(dst.data(), dst.data(), 3, 2, sizes, strides), Error);
}

TEST(FillTest, FillsEveryWidthWithTheGivenBytes) {
  std::vector<double> d(5);
  const double v = -2.5;
  fill(d.data(), &v, sizeof v, 5);
  EXPECT_EQ(d, std::vector<double>(5, -2.5));
  std::vector<uint8_t> b(3, 0);
  const uint8_t one = 1;
  fill(b.data(), &one, 1, 2);
  EXPECT_EQ(b, (std::vector<uint8_t>{1, 1, 0}));  // exactly n elements
  EXPECT_THROW(fill(b.data(), &one, 16, 1), Error);
}

}  // namespace
}  // namespace dpe::host
