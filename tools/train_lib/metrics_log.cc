#include "tools/train_lib/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/json_nesting.h"
#include "tools/train_lib/checkpoint_json.h"

namespace dpe::tools {

void append_metrics(const std::string& path, const TrainConfig& c, const EpochMetrics& m,
                    int world) {
  nlohmann::json j;
  j["epoch"] = m.epoch;
  j["mode"] = c.mode;
  j["model"] = c.model;
  j["world_size"] = world;
  j["batch_size"] = c.batch_size;
  j["train_loss"] = m.train_loss;
  j["test_loss"] = m.test_loss;
  if (m.test_accuracy >= 0) j["test_accuracy"] = m.test_accuracy;
  if (m.perplexity >= 0) {
    j["context"] = c.context;
    j["perplexity"] = m.perplexity;
    j["unigram_perplexity"] = m.unigram_perplexity;
    j["tokens_per_second"] = m.tokens_per_second;
  }
  j["optimizer"] = c.optimizer;
  j["samples_per_second"] = m.samples_per_second;
  j["steps"] = m.steps;
  if (m.global_step >= 0) j["global_step"] = m.global_step;
  // Written and fsynced before the manifest (itself fsynced) is renamed: in order on disk too.
  const std::string line = j.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  DPE_CHECK(fd >= 0, "cannot append metrics to '" << path << "': " << std::strerror(errno));
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                       ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ::close(fd);
  DPE_CHECK(written, "cannot append metrics to '" << path << "': " << why);
}

void trim_metrics(const std::string& path, int last_epoch, FILE* out) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string kept;
  int dropped = 0;
  for (std::string line; std::getline(in, line);) {
    // A line nested too deep to parse safely is not one of ours: dropped as a torn line is.
    const nlohmann::json j =
        json_nesting_depth(line, kMaxCheckpointJsonDepth) <= kMaxCheckpointJsonDepth
            ? nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false)
            : nlohmann::json();
    const bool keep = j.is_object() && j.contains("epoch") && j["epoch"].is_number_integer() &&
                      j["epoch"].get<int64_t>() <= last_epoch;
    if (keep)
      kept += line + "\n";
    else
      ++dropped;
  }
  in.close();
  if (dropped == 0) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << kept;
    f.flush();
    DPE_CHECK(f.good(), "cannot rewrite metrics in '" << tmp << "'");
  }
  DPE_CHECK(::rename(tmp.c_str(), path.c_str()) == 0,
            "cannot rename '" << tmp << "' to '" << path << "'");
  if (last_epoch < 0) {
    std::fprintf(out,
                 "%s: dropped %d line(s): no checkpoint holds their epochs (a run stopped "
                 "between a line and its checkpoint)\n",
                 path.c_str(), dropped);
  } else {
    std::fprintf(out,
                 "%s: dropped %d line(s) after epoch %d, the checkpoint's (a run stopped between "
                 "the line and its checkpoint)\n",
                 path.c_str(), dropped, last_epoch);
  }
}

}  // namespace dpe::tools
