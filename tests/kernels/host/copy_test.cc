#include "kernels/host/copy.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// Element k of the view (row-major over `sizes`), by its strides: the reference for the copies.
template <typename T>
std::vector<T> gathered(const std::vector<T>& src, const std::vector<int64_t>& sizes,
                        const std::vector<int64_t>& strides) {
  int64_t total = 1;
  for (int64_t s : sizes) total *= s;
  std::vector<T> out(static_cast<size_t>(total));
  for (int64_t k = 0; k < total; ++k) {
    int64_t rest = k, at = 0;
    for (size_t d = sizes.size(); d-- > 0;) {
      at += rest % sizes[d] * strides[d];
      rest /= sizes[d];
    }
    out[static_cast<size_t>(k)] = src[static_cast<size_t>(at)];
  }
  return out;
}

// Every permutation of a 4-D tensor's dims (the layout changes between NCHW and channels last
// among them, which take the tiled path), with sizes around the tile and a size-1 dim, gathers
// what the strides name.
TEST(StridedCopyTest, EveryPermutationOfA4DTensor) {
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{3, 32, 7, 7}, {2, 5, 1, 37}, {4, 17, 3, 16}}) {
    const std::vector<int64_t> contiguous = {shape[1] * shape[2] * shape[3], shape[2] * shape[3],
                                             shape[3], 1};
    std::vector<float> src(static_cast<size_t>(shape[0] * contiguous[0]));
    for (size_t k = 0; k < src.size(); ++k) src[k] = static_cast<float>(k);
    std::vector<int> order = {0, 1, 2, 3};
    do {
      std::vector<int64_t> sizes, strides;
      for (int d : order) {
        sizes.push_back(shape[d]);
        strides.push_back(contiguous[d]);
      }
      std::vector<float> dst(src.size(), -1.0f);
      strided_copy(dst.data(), src.data(), sizeof(float), 4, sizes.data(), strides.data());
      ASSERT_EQ(dst, gathered(src, sizes, strides))
          << "shape " << shape[0] << "x" << shape[1] << "x" << shape[2] << "x" << shape[3]
          << ", order " << order[0] << order[1] << order[2] << order[3];
    } while (std::next_permutation(order.begin(), order.end()));
  }
}

// Views the tiles meet besides plain permutations: a broadcast (stride-0) dim beside the
// permuted pair, a slice whose dims cannot merge, a slice permuted, and views of one element
// (rank 0, and every dim of size 1).
TEST(StridedCopyTest, BroadcastSlicedAndSingleElementViews) {
  std::vector<float> src(6 * 20 * 24);
  for (size_t k = 0; k < src.size(); ++k) src[k] = static_cast<float>(k);
  const auto expect_gathers = [&](const std::vector<int64_t>& sizes,
                                  const std::vector<int64_t>& strides, int64_t offset,
                                  const char* what) {
    const std::vector<float> from(src.begin() + offset, src.end());
    std::vector<float> want = gathered(from, sizes, strides), dst(want.size(), -1.0f);
    strided_copy(dst.data(), from.data(), sizeof(float), static_cast<int>(sizes.size()),
                 sizes.data(), strides.data());
    EXPECT_EQ(dst, want) << what;
  };
  // [20, 24] transposed, repeated 3 times by a stride-0 dim: before, between and after the pair.
  expect_gathers({3, 24, 20}, {0, 1, 24}, 0, "broadcast, then transposed");
  expect_gathers({24, 3, 20}, {1, 0, 24}, 0, "broadcast between");
  expect_gathers({20, 24, 3}, {24, 1, 0}, 0, "broadcast last (strided last dim)");
  // Rows 2..17, columns 3..21 of each [20, 24] plane of 6: strides that do not merge.
  expect_gathers({6, 16, 19}, {480, 24, 1}, 2 * 24 + 3, "slice");
  // The same slice with its planes' rows and columns swapped, and channels last.
  expect_gathers({6, 19, 16}, {480, 1, 24}, 2 * 24 + 3, "slice, transposed");
  expect_gathers({16, 19, 6}, {24, 1, 480}, 2 * 24 + 3, "slice, planes last");
  // One element.
  std::vector<float> one = {-1.0f};
  strided_copy(one.data(), src.data() + 7, sizeof(float), 0, nullptr, nullptr);
  EXPECT_EQ(one[0], 7.0f);
  expect_gathers({1, 1, 1}, {480, 24, 1}, 11, "all sizes 1");
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
