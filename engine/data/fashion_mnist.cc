#include "engine/data/fashion_mnist.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include "engine/core/error.h"

namespace dpe {

namespace {

constexpr uint32_t kImagesMagic = 2051;  // 0x00000803: unsigned bytes, 3 dims
constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801: unsigned bytes, 1 dim
constexpr int64_t kNumClasses = 10;
// Far above Fashion-MNIST's 60000; a larger count means a corrupt header, not a bigger dataset.
// The count alone allocates nothing: the data is read in bounded chunks as it arrives
// (read_growing), so a 16-byte file claiming 10 million images fails at once, not after 7.8 GB.
constexpr uint32_t kMaxCount = 10'000'000;
constexpr size_t kReadChunk = size_t{1} << 20;

// Reads a gzip-compressed (or, transparently, an uncompressed) file and turns every zlib
// failure into a dpe::Error naming the file.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      DPE_THROW("FashionMnist: cannot open " << path << ": " << std::strerror(errno));
    }
    DPE_CHECK(S_ISREG(st.st_mode), "FashionMnist: " << path << " is not a regular file");
    file_ = gzopen(path.c_str(), "rb");
    DPE_CHECK(file_ != nullptr, "FashionMnist: cannot open "
                                    << path << ": "
                                    << (errno ? std::strerror(errno) : "gzopen failed"));
  }
  ~GzFile() { gzclose(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads exactly `n` bytes of `what` into `out`, growing it a chunk at a time as the data arrives,
  // so memory follows what the file holds rather than what its header claims.
  void read_growing(std::vector<unsigned char>& out, size_t n, const char* what) {
    out.clear();
    while (out.size() < n) {
      const size_t done = out.size();
      out.resize(done + std::min(kReadChunk, n - done));
      read(out.data() + done, out.size() - done, what, done, n);
    }
  }

  // Reads exactly `n` bytes of `what`, or throws saying whether the data is corrupt or ends early.
  // `before` bytes of the same `what` were read already, of `total` expected (for the message).
  void read(void* dst, size_t n, const char* what, size_t before = 0, size_t total = 0) {
    size_t done = 0;
    char* out = static_cast<char*>(dst);
    while (done < n) {
      const unsigned chunk =
          static_cast<unsigned>(std::min<size_t>(n - done, std::numeric_limits<int>::max()));
      const int got = gzread(file_, out + done, chunk);
      if (got < 0) throw_corrupt(what);
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    if (done < n) {
      int err = Z_OK;
      const char* msg = gzerror(file_, &err);
      if (total == 0) total = n;
      DPE_THROW("FashionMnist: " << path_ << " is truncated: expected " << total << " bytes of "
                                 << what << " at offset " << offset_ - before << ", found "
                                 << before + done
                                 << (err != Z_OK ? std::string(" (") + msg + ")" : std::string()));
    }
    offset_ += n;
  }

  // Checks that the data ends here; reaching the end also makes zlib verify the gzip CRC.
  void expect_end() {
    char c;
    const int got = gzread(file_, &c, 1);
    if (got < 0) throw_corrupt("the gzip trailer");
    DPE_CHECK(got == 0, "FashionMnist: " << path_ << " has unexpected data after " << offset_
                                         << " bytes (header counts and file size disagree)");
    int err = Z_OK;
    const char* msg = gzerror(file_, &err);
    DPE_CHECK(err == Z_OK, "FashionMnist: " << path_ << " is corrupt: " << msg);
  }

  uint32_t read_u32_be(const char* what) {
    std::array<unsigned char, 4> b{};
    read(b.data(), b.size(), what);
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  }

 private:
  [[noreturn]] void throw_corrupt(const char* what) {
    int err = Z_OK;
    const char* msg = gzerror(file_, &err);
    DPE_THROW("FashionMnist: " << path_ << " is corrupt (reading " << what << " at offset "
                               << offset_ << "): " << msg);
  }

  std::string path_;
  gzFile file_ = nullptr;
  size_t offset_ = 0;  // decompressed bytes consumed
};

void check_magic(const std::string& path, uint32_t magic, uint32_t expected, const char* kind) {
  DPE_CHECK(magic == expected, "FashionMnist: " << path << " has magic number " << magic
                                                << ", expected " << expected << " for an IDX "
                                                << kind << " file");
}

void check_count(const std::string& path, uint32_t count) {
  DPE_CHECK(count <= kMaxCount, "FashionMnist: " << path << " claims " << count
                                                 << " items, more than the " << kMaxCount
                                                 << " a valid file can hold");
}

// <root>/<name>.gz, or <root>/<name> when only that exists (an unpacked download).
std::string idx_path(const std::string& root, const std::string& name) {
  const std::string base = root.empty() || root.back() == '/' ? root + name : root + "/" + name;
  struct stat st;
  const bool plain_only =
      ::stat((base + ".gz").c_str(), &st) != 0 && ::stat(base.c_str(), &st) == 0;
  return plain_only ? base : base + ".gz";
}

}  // namespace

Tensor read_idx_images(const std::string& path, bool normalize) {
  GzFile file(path);
  check_magic(path, file.read_u32_be("the magic number"), kImagesMagic, "image");
  const uint32_t count = file.read_u32_be("the image count");
  check_count(path, count);
  const uint32_t rows = file.read_u32_be("the row count");
  const uint32_t cols = file.read_u32_be("the column count");
  DPE_CHECK(rows == FashionMnist::kRows && cols == FashionMnist::kCols,
            "FashionMnist: " << path << " holds " << rows << "x" << cols << " images, expected "
                             << FashionMnist::kRows << "x" << FashionMnist::kCols
                             << " (the Fashion-MNIST and MNIST layout, which the image models "
                                "take): resize them to that");
  const size_t pixels = size_t{count} * rows * cols;
  std::vector<unsigned char> raw;
  file.read_growing(raw, pixels, "pixels");
  file.expect_end();

  std::array<float, 256> lut{};
  for (int v = 0; v < 256; ++v) {
    const float x = static_cast<float>(v) / 255.0f;
    lut[v] = normalize ? (x - FashionMnist::kMean) / FashionMnist::kStd : x;
  }
  Tensor images = Tensor::empty(
      Shape{static_cast<int64_t>(count), 1, FashionMnist::kRows, FashionMnist::kCols});
  float* dst = images.data<float>();
  for (size_t i = 0; i < pixels; ++i) dst[i] = lut[raw[i]];
  return images;
}

Tensor read_idx_labels(const std::string& path) {
  GzFile file(path);
  check_magic(path, file.read_u32_be("the magic number"), kLabelsMagic, "label");
  const uint32_t count = file.read_u32_be("the label count");
  check_count(path, count);
  std::vector<unsigned char> raw;
  file.read_growing(raw, count, "labels");
  file.expect_end();

  Tensor labels = Tensor::empty(Shape{static_cast<int64_t>(count)}, DType::kInt64);
  int64_t* dst = labels.data<int64_t>();
  for (size_t i = 0; i < raw.size(); ++i) {
    DPE_CHECK(raw[i] < kNumClasses, "FashionMnist: " << path << " has label " << int{raw[i]}
                                                     << " at index " << i << ", expected 0.."
                                                     << kNumClasses - 1);
    dst[i] = raw[i];
  }
  return labels;
}

FashionMnist::FashionMnist(const std::string& root, bool train, bool normalize) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = idx_path(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = idx_path(root, prefix + "-labels-idx1-ubyte");
  labels_ = read_idx_labels(labels_path);  // small: fails fast before the images are decoded
  images_ = read_idx_images(images_path, normalize);
  DPE_CHECK(images_.size(0) == labels_.size(0),
            "FashionMnist: " << images_path << " holds " << images_.size(0) << " images but "
                             << labels_path << " holds " << labels_.size(0) << " labels");
  // An empty set would train on nothing or report an accuracy of nothing (0.00%).
  DPE_CHECK(images_.size(0) > 0, "FashionMnist: " << images_path << " holds no images");
}

Example FashionMnist::get(int64_t index) const {
  check_index("FashionMnist", index);
  Example e;
  e.input = images_.narrow(0, index, 1).view(Shape{1, kRows, kCols});
  e.target = labels_.narrow(0, index, 1).view(Shape{});
  return e;
}

Batch FashionMnist::get_batch(const std::vector<int64_t>& indices) const {
  DPE_CHECK(!indices.empty(), "FashionMnist::get_batch: empty list of indices");
  const int64_t b = static_cast<int64_t>(indices.size());
  constexpr int64_t kImage = kRows * kCols;
  Batch batch;
  batch.input = Tensor::empty(Shape{b, 1, kRows, kCols});
  batch.target = Tensor::empty(Shape{b}, DType::kInt64);
  const float* src_images = images_.data<float>();
  const int64_t* src_labels = labels_.data<int64_t>();
  float* dst_images = batch.input.data<float>();
  int64_t* dst_labels = batch.target.data<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t index = indices[i];
    check_index("FashionMnist::get_batch", index);
    std::memcpy(dst_images + i * kImage, src_images + index * kImage, kImage * sizeof(float));
    dst_labels[i] = src_labels[index];
  }
  return batch;
}

}  // namespace dpe
