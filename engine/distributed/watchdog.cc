// Watchdog: see the design note "collective watchdog" in watchdog.h.
#include "engine/distributed/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "engine/core/error.h"

namespace dpe {
namespace distributed {

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  const size_t shown = std::min<size_t>(ranks.size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out << (i + 1 == ranks.size() ? " and " : ", ");
    out << ranks[i];
  }
  if (shown < ranks.size()) out << " and " << ranks.size() - shown << " more";
  return out.str();
}

namespace {

std::chrono::milliseconds period_for(const WatchdogOptions& o) {
  if (o.period.count() > 0) return o.period;
  return std::clamp<std::chrono::milliseconds>(o.timeout / 10, std::chrono::milliseconds(50),
                                               std::chrono::seconds(5));
}

// "rank 3", "ranks 1, 3 and 4" (at most 16 named, then a count).
std::string ranks_named(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

std::string collective(int64_t seq, const std::string& op) {
  std::string s = "collective #" + std::to_string(seq);
  if (!op.empty()) s += " (" + op + ")";
  return s;
}

// Where a rank was, from its last heartbeat, as seen while collective `seq` waits.
std::string whereabouts(const Heartbeat& h, int64_t seq) {
  if (h.in_flight == seq) return "last seen in this collective";
  if (h.in_flight > 0) return "last seen in " + collective(h.in_flight, h.op);
  if (h.completed == 0) return "last seen before its first collective";
  return "last seen after collective #" + std::to_string(h.completed);
}

}  // namespace

std::string encode_heartbeat(const Heartbeat& h) {
  std::ostringstream out;
  out << h.beat << ' ' << h.completed << ' ' << h.in_flight << ' ' << h.op;
  return out.str();
}

std::optional<Heartbeat> decode_heartbeat(const std::string& text) {
  Heartbeat h;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%" SCNd64 " %" SCNd64 " %" SCNd64 " %n", &h.beat, &h.completed,
                  &h.in_flight, &consumed) != 3) {
    return std::nullopt;
  }
  if (h.beat < 0 || h.completed < 0 || h.in_flight < 0) return std::nullopt;
  h.op = text.substr(static_cast<size_t>(consumed));
  return h;
}

std::vector<Stall> find_stalls(int self, int64_t seq,
                               const std::vector<std::optional<Heartbeat>>& earlier,
                               const std::vector<std::optional<Heartbeat>>& later) {
  std::vector<Stall> stalls;
  const size_t n = std::max(earlier.size(), later.size());
  for (size_t i = 0; i < n; ++i) {
    const int r = static_cast<int>(i);
    if (r == self) continue;
    const std::optional<Heartbeat> a = i < earlier.size() ? earlier[i] : std::nullopt;
    const std::optional<Heartbeat> b = i < later.size() && later[i] ? later[i] : a;
    if (!b) {
      stalls.push_back(Stall{r, StallKind::kNeverSeen, Heartbeat{}});
      continue;
    }
    // A rank that completed this collective took part in it: it does not hold it up.
    if (b->completed >= seq) continue;
    if (a && a->beat == b->beat) {
      stalls.push_back(Stall{r, StallKind::kSilent, *b});
    } else if (b->in_flight != seq) {
      stalls.push_back(Stall{r, StallKind::kBehind, *b});
    }
  }
  return stalls;
}

std::string describe_stalls(const std::vector<Stall>& stalls, int64_t seq, double window_s,
                            const std::string& board) {
  if (stalls.empty()) {
    return "every rank's heartbeat advances and each is in collective #" + std::to_string(seq) +
           " or past it: the connection between the ranks is stuck, not a rank";
  }
  std::vector<std::string> parts;
  std::vector<int> silent, never;
  for (const Stall& s : stalls) {
    if (s.kind == StallKind::kSilent) silent.push_back(s.rank);
    if (s.kind == StallKind::kNeverSeen) never.push_back(s.rank);
  }
  char window[32];
  std::snprintf(window, sizeof window, "%.1f", window_s);
  if (!silent.empty()) {
    std::string part = ranks_named(silent) + " stopped answering (" +
                       (silent.size() == 1 ? "its heartbeat" : "their heartbeats") +
                       " did not advance in " + window + " s: stopped, hung, or " +
                       (silent.size() == 1 ? "its host is" : "their hosts are") + " gone";
    if (silent.size() == 1) {
      for (const Stall& s : stalls) {
        if (s.rank == silent[0]) part += "; " + whereabouts(s.last, seq);
      }
    }
    parts.push_back(part + ")");
  }
  size_t behind_shown = 0, behind = 0;
  for (const Stall& s : stalls) {
    if (s.kind != StallKind::kBehind) continue;
    ++behind;
    if (behind_shown == 8) continue;
    ++behind_shown;
    std::string part = "rank " + std::to_string(s.rank) + " has not reached collective #" +
                       std::to_string(seq) + ": it is alive but ";
    if (s.last.in_flight > 0) {
      part += "in " + collective(s.last.in_flight, s.last.op);
    } else {
      part += (s.last.completed == 0
                   ? std::string("has completed no collective")
                   : "last completed collective #" + std::to_string(s.last.completed)) +
              " and is in none (busy outside the collectives: a long evaluation or checkpoint, "
              "or a hang in its own code)";
    }
    parts.push_back(part);
  }
  if (behind > behind_shown) {
    parts.push_back(std::to_string(behind - behind_shown) + " more ranks have not reached it");
  }
  if (!never.empty()) {
    parts.push_back(ranks_named(never) + (never.size() == 1 ? " has" : " have") +
                    " published no heartbeat on " + board);
  }
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

Watchdog::Watchdog(int rank, int size, std::shared_ptr<HeartbeatBoard> board,
                   WatchdogOptions options)
    : rank_(rank),
      size_(size),
      board_(std::move(board)),
      options_(std::move(options)),
      period_(period_for(options_)) {
  DPE_CHECK(board_ != nullptr, "Watchdog (rank " << rank << "): no heartbeat board");
  DPE_CHECK(size >= 1 && rank >= 0 && rank < size,
            "Watchdog: rank " << rank << " is outside 0.." << size - 1);
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::begin(int64_t seq, const std::string& op) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_ = seq;
  op_ = op;
  started_ = Clock::now();
}

void Watchdog::end(int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_ == seq) {
    in_flight_ = 0;
    op_.clear();
  }
  completed_ = std::max(completed_, seq);
}

int64_t Watchdog::in_flight() {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

void Watchdog::publish() {
  Heartbeat h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    h.beat = ++beat_;
    h.completed = completed_;
    h.in_flight = in_flight_;
    h.op = op_;
  }
  try {
    board_->publish(rank_, h);
  } catch (const std::exception&) {
    // The board is gone (rank 0 ended first) or silent: diagnose() says so when it matters.
  }
}

Watchdog::Reading Watchdog::read_all(int64_t seq) {
  Reading r;
  r.seq = seq;
  r.beats.resize(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) r.beats[static_cast<size_t>(p)] = board_->read(p);
  }
  r.at = Clock::now();
  return r;
}

std::string Watchdog::unreachable(const std::string& error) const {
  const int host = board_->served_by();
  if (host >= 0 && host != rank_) {
    return "rank " + std::to_string(host) + " stopped answering: " + board_->where() +
           ", which it serves, does not reply (stopped, hung, or its host is gone) [" + error + "]";
  }
  return "no rank can be named: " + board_->where() + " does not reply [" + error + "]";
}

std::string Watchdog::diagnose() {
  std::lock_guard<std::mutex> one_at_a_time(diagnose_mu_);
  int64_t seq = 0;
  std::optional<Reading> first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = in_flight_;
    if (first_reading_ && first_reading_->seq == seq) first = first_reading_;
  }
  if (seq == 0) return "no collective in flight";
  try {
    if (!first) first = read_all(seq);
    const auto due = first->at + 3 * period_;
    if (Clock::now() < due) std::this_thread::sleep_until(due);
    const Reading later = read_all(seq);
    const double window = std::chrono::duration<double>(later.at - first->at).count();
    return describe_stalls(find_stalls(rank_, seq, first->beats, later.beats), seq, window,
                           board_->where());
  } catch (const std::exception& e) {
    return unreachable(e.what());
  }
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    publish();
    lock.lock();
    if (stop_) break;
    if (in_flight_ > 0) {
      const int64_t seq = in_flight_;
      const std::string op = op_;
      if ((!first_reading_ || first_reading_->seq != seq) &&
          Clock::now() - started_ >= options_.timeout / 2) {
        lock.unlock();
        std::optional<Reading> reading;
        try {
          reading = read_all(seq);
        } catch (const std::exception&) {
          // diagnose() reads again and names the board's rank.
        }
        lock.lock();
        if (reading && in_flight_ == seq) first_reading_ = std::move(reading);
      }
      // By then the first reading is 3 periods old or more (period <= timeout / 10), so
      // diagnose() reads once more without waiting, and this thread's heartbeat goes on.
      if (options_.expiry.count() > 0 && in_flight_ == seq &&
          Clock::now() - started_ >= options_.expiry) {
        lock.unlock();
        const std::string why = diagnose();
        lock.lock();
        if (in_flight_ == seq && !stop_) {
          const double waited = std::chrono::duration<double>(Clock::now() - started_).count();
          std::fprintf(stderr,
                       "%s %s (rank %d of %d): %s has not completed after %.1f s (timeout %.1f "
                       "s): %s; the watchdog ends this process\n",
                       options_.backend.c_str(), op.c_str(), rank_, size_,
                       collective(seq, "").c_str(), waited,
                       std::chrono::duration<double>(options_.timeout).count(), why.c_str());
          std::fflush(stderr);
          if (options_.terminate) options_.terminate();
          ::_exit(1);
        }
      }
    }
    cv_.wait_for(lock, period_, [&] { return stop_; });
  }
}

}  // namespace distributed
}  // namespace dpe
