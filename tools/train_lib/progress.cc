#include "tools/train_lib/progress.h"

#include <unistd.h>

#include <algorithm>

namespace dpe::tools {

Progress::Progress(std::string label, int64_t total_batches, FILE* out, bool enabled)
    : label_(std::move(label)),
      total_(total_batches),
      out_(out),
      enabled_(enabled),
      tty_(isatty(fileno(out)) != 0),
      plain_every_(std::max<int64_t>(1, total_batches / 10)),
      start_(std::chrono::steady_clock::now()) {}

void Progress::update(int64_t batch_samples, double loss) {
  ++batches_;
  samples_ += batch_samples;
  loss_sum_ += loss;
  if (!enabled_) return;
  if (tty_ || batches_ % plain_every_ == 0) draw(false);
}

void Progress::draw(bool final) {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = secs > 0 ? static_cast<double>(samples_) / secs : 0.0;
  const double left = batches_ > 0 ? secs / static_cast<double>(batches_) *
                                         static_cast<double>(total_ - batches_)
                                   : 0.0;
  const int width = 24;
  const int filled = total_ > 0 ? static_cast<int>(width * batches_ / total_) : width;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  std::fprintf(out_, "%s%s [%s] %lld/%lld  %.0f samples/s  loss %.4f  %s %.0fs%s",
               tty_ ? "\r" : "", label_.c_str(), bar.c_str(), static_cast<long long>(batches_),
               static_cast<long long>(total_), rate, mean_loss(), final ? "took" : "left",
               final ? secs : left, tty_ && !final ? "" : "\n");
  std::fflush(out_);
}

double Progress::finish() {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (enabled_ && (tty_ || batches_ % plain_every_ != 0)) draw(true);
  return secs > 0 ? static_cast<double>(samples_) / secs : 0.0;
}

}  // namespace dpe::tools
