#include "kernels/host/embedding.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

TEST(EmbeddingTest, LookupAndScatterAddMatchReference) {
  HostContext ctx;
  struct Dims {
    int64_t n, rows, cols;
  };
  // The last case is large enough for the OpenMP loops, with many repeated indices.
  for (Dims d : {Dims{1, 1, 1}, Dims{9, 4, 3}, Dims{4096, 50, 130}}) {
    const auto w = random_floats(d.rows * d.cols, 1);
    const auto gy = random_floats(d.n * d.cols, 2);
    std::vector<int64_t> index(d.n);
    for (int64_t i = 0; i < d.n; ++i) index[i] = (i * 7 + 3) % d.rows;
    std::vector<double> y(d.n * d.cols), gw(d.rows * d.cols, 0.0);
    for (int64_t i = 0; i < d.n; ++i) {
      for (int64_t j = 0; j < d.cols; ++j) {
        y[i * d.cols + j] = w[index[i] * d.cols + j];
        gw[index[i] * d.cols + j] += gy[i * d.cols + j];
      }
    }
    std::vector<float> got_y(d.n * d.cols), got_gw(d.rows * d.cols, 5.0f);
    embedding_forward(ctx, w.data(), index.data(), got_y.data(), d.n, d.rows, d.cols);
    expect_close(y, got_y, 0, 0, "embedding y");
    embedding_backward(ctx, index.data(), gy.data(), got_gw.data(), d.n, d.rows, d.cols);
    expect_close(gw, got_gw, 1e-5, 1e-5, "embedding gw");
  }
}

// The accumulating backward is a gradient that arrived first plus embedding_backward's, bit for
// bit on every row an index names, and leaves the others as they were.
TEST(EmbeddingTest, AccumulatingIsAddingTheDenseGradient) {
  HostContext ctx;
  struct Dims {
    int64_t n, rows, cols;
  };
  for (Dims d : {Dims{1, 1, 1}, Dims{9, 40, 3}, Dims{4096, 50, 130}, Dims{1024, 3000, 256}}) {
    const auto gy = random_floats(d.n * d.cols, 2);
    const auto first = random_floats(d.rows * d.cols, 3);
    std::vector<int64_t> index(d.n);
    for (int64_t i = 0; i < d.n; ++i) index[i] = (i * 7 + 3) % d.rows;
    std::vector<float> dense(d.rows * d.cols);
    embedding_backward(ctx, index.data(), gy.data(), dense.data(), d.n, d.rows, d.cols);
    std::vector<bool> named(d.rows, false);
    for (int64_t i : index) named[i] = true;
    std::vector<float> got = first;
    embedding_backward_accumulate(ctx, index.data(), gy.data(), got.data(), d.n, d.rows, d.cols);
    for (int64_t r = 0; r < d.rows; ++r) {
      for (int64_t j = 0; j < d.cols; ++j) {
        const int64_t k = r * d.cols + j;
        const float want = named[r] ? first[k] + dense[k] : first[k];
        ASSERT_EQ(got[k], want) << "row " << r << " column " << j;
      }
    }
  }
}

TEST(EmbeddingTest, BadIndexThrowsBeforeWriting) {
  HostContext ctx;
  const auto w = random_floats(5 * 2, 1);
  const int64_t index[3] = {0, 4, 5};
  std::vector<float> y(6, -1.0f);
  try {
    embedding_forward(ctx, w.data(), index, y.data(), 3, 5, 2);
    FAIL() << "expected dpe::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "embedding: index 5 is out of range for 5 rows");
  }
  EXPECT_EQ(y, std::vector<float>(6, -1.0f));
  const int64_t negative[1] = {-1};
  std::vector<float> gw(10);
  EXPECT_THROW(embedding_backward(ctx, negative, y.data(), gw.data(), 1, 5, 2), Error);
  std::vector<float> acc(10, 2.0f);
  EXPECT_THROW(embedding_backward_accumulate(ctx, index, y.data(), acc.data(), 3, 5, 2), Error);
  EXPECT_EQ(acc, std::vector<float>(10, 2.0f));
}

}  // namespace
}  // namespace dpe::host
