#include "engine/data/fashion_mnist.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "engine/core/error.h"

namespace dpe {
namespace {

using Bytes = std::vector<unsigned char>;

void put_u32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<unsigned char>(v >> shift));
}

// Pixel p of image i is (i * 31 + p) % 256; label i is i % 10.
Bytes idx_images(uint32_t count, uint32_t rows = 28, uint32_t cols = 28, uint32_t magic = 2051) {
  Bytes out;
  put_u32(out, magic);
  put_u32(out, count);
  put_u32(out, rows);
  put_u32(out, cols);
  for (uint32_t i = 0; i < count; ++i) {
    for (uint32_t p = 0; p < rows * cols; ++p)
      out.push_back(static_cast<unsigned char>((i * 31 + p) % 256));
  }
  return out;
}

Bytes idx_labels(uint32_t count, uint32_t magic = 2049) {
  Bytes out;
  put_u32(out, magic);
  put_u32(out, count);
  for (uint32_t i = 0; i < count; ++i) out.push_back(static_cast<unsigned char>(i % 10));
  return out;
}

class FashionMnistTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = std::string(tmp ? tmp : "/tmp") + "/fashion_mnist_test_" +
            testing::UnitTest::GetInstance()->current_test_info()->name();
    ::mkdir(root_.c_str(), 0755);
  }

  std::string path(const std::string& name) const { return root_ + "/" + name; }

  void write_gz(const std::string& name, const Bytes& data) const {
    gzFile f = gzopen(path(name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())),
              static_cast<int>(data.size()));
    ASSERT_EQ(gzclose(f), Z_OK);
  }

  Bytes read_raw(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
  }
  void write_raw(const std::string& name, const Bytes& data) const {
    std::ofstream out(path(name), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data.data()),
              static_cast<std::streamsize>(data.size()));
  }

  void write_split(const std::string& prefix, uint32_t images, uint32_t labels) const {
    write_gz(prefix + "-images-idx3-ubyte.gz", idx_images(images));
    write_gz(prefix + "-labels-idx1-ubyte.gz", idx_labels(labels));
  }

  // The message of the dpe::Error `f` throws; fails the test when it throws nothing.
  template <typename F>
  static std::string error_of(F f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no dpe::Error thrown";
    return "";
  }

  std::string root_;
};

#define EXPECT_MENTIONS(message, part) \
  EXPECT_NE((message).find(part), std::string::npos) << "message: " << (message)

TEST_F(FashionMnistTest, ReadsImagesAndLabels) {
  write_split("train", 5, 5);
  write_split("t10k", 3, 3);
  FashionMnist train(root_, true, /*normalize=*/false);
  EXPECT_EQ(train.size(), 5);
  EXPECT_EQ(train.images().shape(), (Shape{5, 1, 28, 28}));
  EXPECT_EQ(train.labels().shape(), (Shape{5}));
  EXPECT_EQ(train.labels().dtype(), DType::kInt64);
  const auto px = train.images().to_vector<float>();
  for (uint32_t i = 0; i < 5; ++i) {
    for (uint32_t p : {0u, 1u, 783u}) {
      EXPECT_FLOAT_EQ(px[i * 784 + p], static_cast<float>((i * 31 + p) % 256) / 255.0f);
    }
  }
  EXPECT_EQ(train.labels().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(FashionMnist(root_, /*train=*/false).size(), 3);
}

TEST_F(FashionMnistTest, NormalizesWithFashionMnistStatistics) {
  Bytes images = idx_images(1);
  images[16] = 0;
  images[17] = 255;
  write_gz("train-images-idx3-ubyte.gz", images);
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(1));
  FashionMnist data(root_);  // normalize is the default
  const auto px = data.images().to_vector<float>();
  EXPECT_FLOAT_EQ(px[0], (0.0f - 0.2860f) / 0.3530f);
  EXPECT_FLOAT_EQ(px[1], (1.0f - 0.2860f) / 0.3530f);
  EXPECT_FLOAT_EQ(FashionMnist::kMean, 0.2860f);
  EXPECT_FLOAT_EQ(FashionMnist::kStd, 0.3530f);
}

TEST_F(FashionMnistTest, GetAndGetBatch) {
  write_split("train", 6, 6);
  FashionMnist data(root_);
  const Example e = data.get(4);
  EXPECT_EQ(e.input.shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(e.target.shape(), (Shape{}));
  EXPECT_EQ(e.target.to_vector<int64_t>(), (std::vector<int64_t>{4}));
  const Batch b = data.get_batch({5, 1, 4});
  EXPECT_EQ(b.input.shape(), (Shape{3, 1, 28, 28}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{5, 1, 4}));
  const Batch slow = data.Dataset::get_batch({5, 1, 4});
  EXPECT_EQ(b.input.to_vector<float>(), slow.input.to_vector<float>());
  EXPECT_EQ(b.target.to_vector<int64_t>(), slow.target.to_vector<int64_t>());
  EXPECT_THROW(data.get(6), Error);
  EXPECT_THROW(data.get_batch({0, -1}), Error);
}

// MNIST's files have Fashion-MNIST's names and format; an unpacked download (no .gz) reads too,
// and a .gz file wins where both exist.
TEST_F(FashionMnistTest, ReadsUnpackedFilesUnderTheSameNames) {
  write_raw("train-images-idx3-ubyte", idx_images(4));
  write_raw("train-labels-idx1-ubyte", idx_labels(4));
  EXPECT_EQ(FashionMnist(root_, true).size(), 4);
  write_split("train", 2, 2);
  EXPECT_EQ(FashionMnist(root_, true).size(), 2);
}

TEST_F(FashionMnistTest, MissingFile) {
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(2));
  const std::string msg = error_of([&] { FashionMnist data(root_); });
  EXPECT_MENTIONS(msg, path("train-images-idx3-ubyte.gz"));
  EXPECT_MENTIONS(msg, "No such file");
}

TEST_F(FashionMnistTest, WrongMagicNumbers) {
  write_gz("img.gz", idx_images(2, 28, 28, /*magic=*/2049));
  std::string msg = error_of([&] { read_idx_images(path("img.gz")); });
  EXPECT_MENTIONS(msg, path("img.gz"));
  EXPECT_MENTIONS(msg, "magic number 2049, expected 2051");
  write_gz("lbl.gz", idx_labels(2, /*magic=*/2051));
  msg = error_of([&] { read_idx_labels(path("lbl.gz")); });
  EXPECT_MENTIONS(msg, "magic number 2051, expected 2049");
}

TEST_F(FashionMnistTest, WrongImageSize) {
  write_gz("img.gz", idx_images(2, 32, 32));
  EXPECT_MENTIONS(error_of([&] { read_idx_images(path("img.gz")); }),
                  "holds 32x32 images, expected 28x28 (the Fashion-MNIST and MNIST layout");
}

TEST_F(FashionMnistTest, CountsThatDisagreeWithTheData) {
  Bytes short_data = idx_images(3);
  short_data.resize(short_data.size() - 100);  // claims 3 images, holds 2.87
  write_gz("short.gz", short_data);
  std::string msg = error_of([&] { read_idx_images(path("short.gz")); });
  EXPECT_MENTIONS(msg, path("short.gz"));
  EXPECT_MENTIONS(msg, "truncated");

  Bytes long_data = idx_labels(3);
  long_data.push_back(1);  // one label more than the count says
  write_gz("long.gz", long_data);
  EXPECT_MENTIONS(error_of([&] { read_idx_labels(path("long.gz")); }), "unexpected data after 11");

  Bytes huge = idx_labels(0);
  huge[4] = 0x7f;  // count 2^31 - ish: a corrupt header, refused before allocating
  write_gz("huge.gz", huge);
  EXPECT_MENTIONS(error_of([&] { read_idx_labels(path("huge.gz")); }), "a valid file can hold");
}

TEST_F(FashionMnistTest, AHeaderClaimingMillionsOfImagesAllocatesOnlyWhatTheFileHolds) {
  // 16 bytes claiming 10 000 000 images (within the count limit): 7.8 GB if believed.
  Bytes header;
  put_u32(header, 0x00000803);
  put_u32(header, 10'000'000);
  put_u32(header, 28);
  put_u32(header, 28);
  write_gz("claims.gz", header);
  struct rusage before {};
  ::getrusage(RUSAGE_SELF, &before);
  const std::string msg = error_of([&] { read_idx_images(path("claims.gz")); });
  struct rusage after {};
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_MENTIONS(msg, "truncated: expected 7840000000 bytes of pixels at offset 16, found 0");
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB of peak memory grown";
}

TEST_F(FashionMnistTest, LabelOutOfRange) {
  Bytes labels = idx_labels(4);
  labels[8 + 2] = 12;
  write_gz("lbl.gz", labels);
  EXPECT_MENTIONS(error_of([&] { read_idx_labels(path("lbl.gz")); }),
                  "has label 12 at index 2, expected 0..9");
}

TEST_F(FashionMnistTest, TruncatedGzipFile) {
  write_gz("img.gz", idx_images(20));
  Bytes gz = read_raw("img.gz");
  gz.resize(gz.size() / 2);
  write_raw("img.gz", gz);
  const std::string msg = error_of([&] { read_idx_images(path("img.gz")); });
  EXPECT_MENTIONS(msg, path("img.gz"));
  EXPECT_MENTIONS(msg, "truncated");
}

TEST_F(FashionMnistTest, CorruptGzipChecksum) {
  write_gz("lbl.gz", idx_labels(50));
  Bytes gz = read_raw("lbl.gz");
  gz[gz.size() - 8] ^= 0xff;  // the CRC-32 of the trailer
  write_raw("lbl.gz", gz);
  const std::string msg = error_of([&] { read_idx_labels(path("lbl.gz")); });
  EXPECT_MENTIONS(msg, path("lbl.gz"));
  EXPECT_MENTIONS(msg, "corrupt");
}

TEST_F(FashionMnistTest, CorruptGzipData) {
  write_gz("img.gz", idx_images(20));
  Bytes gz = read_raw("img.gz");
  for (size_t i = 20; i < gz.size() - 8; i += 7) gz[i] ^= 0x5a;
  write_raw("img.gz", gz);
  EXPECT_MENTIONS(error_of([&] { read_idx_images(path("img.gz")); }), path("img.gz"));
}

TEST_F(FashionMnistTest, ImageAndLabelCountsMustMatch) {
  write_split("train", 4, 5);
  const std::string msg = error_of([&] { FashionMnist data(root_); });
  EXPECT_MENTIONS(msg, "holds 4 images but");
  EXPECT_MENTIONS(msg, path("train-labels-idx1-ubyte.gz") + " holds 5 labels");
}

TEST(FashionMnistRealDataTest, ReadsTheInstalledDataset) {
  const std::string root = FashionMnist::kDefaultRoot;
  struct stat st;
  if (::stat((root + "/train-images-idx3-ubyte.gz").c_str(), &st) != 0) {
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << root;
  }
  FashionMnist train(root, true);
  FashionMnist test(root, false);
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(train.images().shape(), (Shape{60000, 1, 28, 28}));
  // The documented statistics are the training set's: normalized pixels have mean 0, std 1.
  const auto px = train.images().to_vector<float>();
  double mean = 0, sq = 0;
  for (float v : px) mean += v;
  mean /= px.size();
  for (float v : px) sq += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / px.size()), 1.0, 0.01);
  // Ten balanced classes.
  std::vector<int64_t> per_class(10);
  for (int64_t label : train.labels().to_vector<int64_t>()) ++per_class.at(label);
  for (int64_t c : per_class) EXPECT_EQ(c, 6000);
}

}  // namespace
}  // namespace dpe
