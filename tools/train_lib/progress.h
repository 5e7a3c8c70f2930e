// Progress: the training progress line of the main process — batches done, samples per second,
// running mean loss and time left — redrawn in place on a terminal, or printed as plain lines
// (every `plain_every` batches and at the end) when the output is a file or a pipe.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dpe::tools {

class Progress {
 public:
  Progress(std::string label, int64_t total_batches, FILE* out, bool enabled = true);
  // Called after each batch with its size and (reduced) loss.
  void update(int64_t batch_samples, double loss);
  // Ends the line; returns the epoch's samples per second.
  double finish();
  double mean_loss() const { return batches_ ? loss_sum_ / static_cast<double>(batches_) : 0.0; }

 private:
  void draw(bool final);

  std::string label_;
  int64_t total_, batches_ = 0, samples_ = 0;
  double loss_sum_ = 0;
  FILE* out_;
  bool enabled_, tty_;
  int64_t plain_every_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dpe::tools
