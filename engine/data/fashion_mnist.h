// FashionMnist: the Fashion-MNIST dataset read from its IDX .gz files (torchvision's
// FashionMNIST(root, train)): images float32 [N, 1, 28, 28], labels int64 [N].
//
// Pixels are scaled to [0, 1] and then, unless normalize is false, normalized with
// Fashion-MNIST's training-set statistics: (x - kMean) / kStd, mean 0.2860 and std 0.3530
// (torchvision's Normalize((0.2860,), (0.3530,)) after ToTensor()).
//
// Threading contract: immutable after construction; every method may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace dpe {

class FashionMnist : public Dataset {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  static constexpr float kMean = 0.2860f;
  static constexpr float kStd = 0.3530f;
  static constexpr int64_t kRows = 28;
  static constexpr int64_t kCols = 28;

  // Reads <root>/train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz (train), or the
  // t10k-... pair (test); a file missing with .gz is read without it when that exists (the names
  // and format are MNIST's too, so any such set of 28x28 images with labels 0-9 reads). Throws
  // dpe::Error naming the file and what is wrong when a file is missing, truncated, corrupt, has a
  // wrong magic number or image size, or when the image and label counts differ, or when they hold
  // no images.
  explicit FashionMnist(const std::string& root = kDefaultRoot, bool train = true,
                        bool normalize = true);

  int64_t size() const override { return labels_.size(0); }
  // input: float32 [1, 28, 28]; target: int64 scalar (shape []).
  Example get(int64_t index) const override;
  // input: float32 [B, 1, 28, 28]; target: int64 [B]; one gather per batch.
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& images() const { return images_; }  // float32 [N, 1, 28, 28] on host:0
  const Tensor& labels() const { return labels_; }  // int64 [N] on host:0

 private:
  Tensor images_;
  Tensor labels_;
};

// Reads an IDX image file (magic 2051, gzip-compressed or plain) of 28x28 images into float32
// [N, 1, 28, 28] on host:0, scaled to [0, 1] and normalized as above when `normalize`.
Tensor read_idx_images(const std::string& path, bool normalize = true);
// Reads an IDX label file (magic 2049) into int64 [N] on host:0.
Tensor read_idx_labels(const std::string& path);

}  // namespace dpe
