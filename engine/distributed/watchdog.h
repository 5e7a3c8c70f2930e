// Watchdog: bounds a process group's collectives and names the rank that holds them up, from
// heartbeats every rank publishes on a board (the rendezvous store: store_heartbeats.h).
//
// Design note "collective watchdog": every collective of a group gets a sequence number, the same
// on every rank (ranks submit collectives in the same order: process_group.h). Each rank runs one
// watchdog thread that publishes, every period (timeout / 10, from 50 ms to 5 s), a heartbeat: a
// beat that counts up while the process runs, the last collective it completed and the one it is
// in. A process that is stopped (SIGSTOP, a debugger), hung hard or whose host is gone stops
// beating; a process busy outside the collectives (a long evaluation, a hang in its own code)
// beats on but stays behind in the sequence. When a collective has run for half the timeout the
// watchdog reads every peer's heartbeat once; diagnose() reads them again (at least 3 periods
// later) and names the ranks that are silent (their beat did not advance), behind (alive, but not
// yet in this collective) or never seen. A board that does not answer names the rank that serves
// it (rank 0 serves the store).
//
// Who ends a stalled collective: a backend with a timeout of its own (Gloo's context timeout)
// throws at the timeout, and its error carries diagnose()'s sentence; the watchdog ends the process
// itself only as a backstop (`expiry` later). MPI has no timeout, and a blocked MPI call cannot be
// cancelled: there `expiry` is the timeout, and the watchdog prints its message on stderr and
// calls `terminate` (MPI_Abort), which takes the whole job down.
//
// Threading contract: begin() and end() are called by the thread that runs the group's collectives
// (one at a time, as the group's queue runs them); diagnose() may be called from any thread; the
// destructor stops and joins the watchdog thread (at most one board request later).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace dpe {
namespace distributed {

// What a rank publishes about itself every heartbeat period.
// "0, 2 and 5" (at most 16 shown, then "and N more"): the ranks a message names.
std::string rank_list(const std::vector<int>& ranks);

struct Heartbeat {
  int64_t beat = 0;       // counts up every period while the process runs
  int64_t completed = 0;  // the sequence number of the last collective it completed (0: none)
  int64_t in_flight = 0;  // the sequence number of the collective it is in (0: none)
  std::string op;         // in_flight's op, "all_reduce(sum)"; empty when none
};

// "beat completed in_flight op": the board's value. decode_heartbeat returns nullopt for text that
// is not one.
std::string encode_heartbeat(const Heartbeat& h);
std::optional<Heartbeat> decode_heartbeat(const std::string& text);

// Where the ranks' heartbeats meet. Implementations throw when the board cannot be reached.
class HeartbeatBoard {
 public:
  virtual ~HeartbeatBoard() = default;
  virtual void publish(int rank, const Heartbeat& h) = 0;
  // nullopt: `rank` has published nothing yet.
  virtual std::optional<Heartbeat> read(int rank) = 0;
  // Where the board is, for messages: "the store at 10.0.0.1:29500".
  virtual std::string where() const = 0;
  // The rank whose process serves the board (its silence silences the board), -1 for none.
  virtual int served_by() const { return -1; }
};

// Why a rank holds up collective `seq`.
enum class StallKind {
  kSilent,     // its beat did not advance between two readings
  kBehind,     // alive, but it has neither completed collective seq nor entered it
  kNeverSeen,  // it published no heartbeat at all
};

struct Stall {
  int rank = 0;
  StallKind kind = StallKind::kSilent;
  Heartbeat last;  // its latest heartbeat (kNeverSeen: none)
};

// The ranks that hold up collective `seq` of rank `self`, from two readings of every rank's
// heartbeat (`earlier` and `later`, indexed by rank, nullopt where a rank published nothing), in
// rank order. Ranks that completed collective `seq` or are in it, and `self`, are never named.
std::vector<Stall> find_stalls(int self, int64_t seq,
                               const std::vector<std::optional<Heartbeat>>& earlier,
                               const std::vector<std::optional<Heartbeat>>& later);

// The sentence naming the stalls of collective `seq`: "rank 1 stopped answering (its heartbeat
// did not advance in 2.5 s: stopped, hung, or its host is gone)"; `window_s` is the time between
// the two readings, `board` the board's where().
std::string describe_stalls(const std::vector<Stall>& stalls, int64_t seq, double window_s,
                            const std::string& board);

struct WatchdogOptions {
  // A collective in flight longer than this is stalled (init_process_group's timeout).
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // Between heartbeats; 0: timeout / 10, from 50 ms to 5 s.
  std::chrono::milliseconds period{0};
  // How long after a collective began the watchdog ends the process: the timeout where the backend
  // has none of its own (MPI); 0: never.
  std::chrono::milliseconds expiry{0};
  // Ends the process once the watchdog has printed why; must not return. Default: _exit(1).
  std::function<void()> terminate;
  std::string backend = "gloo";  // in messages
};

class Watchdog {
 public:
  // Starts the watchdog thread of rank `rank` of `size`; it publishes a first heartbeat at once.
  Watchdog(int rank, int size, std::shared_ptr<HeartbeatBoard> board, WatchdogOptions options);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Collective `seq` (`op`) starts / has ended on this rank.
  void begin(int64_t seq, const std::string& op);
  void end(int64_t seq);

  // Who holds up the collective in flight, as a sentence (describe_stalls, or why no rank can be
  // named); reads the board, waiting until two readings are 3 periods apart. "no collective in
  // flight" when none is.
  std::string diagnose();

  // The sequence number of the collective in flight, 0 for none.
  int64_t in_flight();
  std::chrono::milliseconds period() const { return period_; }
  const WatchdogOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Reading {
    int64_t seq = 0;  // the collective it was taken for
    Clock::time_point at;
    std::vector<std::optional<Heartbeat>> beats;
  };

  void loop();
  void publish();
  // Every peer's heartbeat now; throws when the board does not answer.
  Reading read_all(int64_t seq);
  // The sentence for a board that does not answer.
  std::string unreachable(const std::string& error) const;

  const int rank_;
  const int size_;
  const std::shared_ptr<HeartbeatBoard> board_;
  const WatchdogOptions options_;
  const std::chrono::milliseconds period_;

  std::mutex mu_;  // guards what follows, and wakes the thread
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t beat_ = 0;
  int64_t completed_ = 0;
  int64_t in_flight_ = 0;
  std::string op_;
  Clock::time_point started_;             // when in_flight_ began
  std::optional<Reading> first_reading_;  // taken at half the timeout of in_flight_

  std::mutex diagnose_mu_;  // one diagnosis at a time
  std::thread thread_;
};

}  // namespace distributed
}  // namespace dpe
