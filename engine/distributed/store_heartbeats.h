// StoreHeartbeats: the watchdog's heartbeat board (watchdog.h) on a TCPStore: rank r's heartbeat
// is the key "watchdog/<prefix>/<r>". The board has a client connection of its own, so a request
// queued behind another client's never delays a heartbeat, and a diagnosis never waits on Gloo's.
//
// Once a request fails (the store does not reply: its process is stopped, or gone), every later
// one fails at once with the same error, rather than waiting out the client's reply timeout again.
//
// Threading contract: publish and read may be called from any thread (the client serialises its
// requests).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/distributed/watchdog.h"

namespace dpe {
namespace distributed {

class TCPStore;

class StoreHeartbeats : public HeartbeatBoard {
 public:
  // `store`: a client connection of the board's own. `served_by`: the rank whose process serves
  // the store (rank 0 for init_process_group's).
  StoreHeartbeats(std::shared_ptr<TCPStore> store, std::string prefix, int served_by = 0);

  void publish(int rank, const Heartbeat& h) override;
  std::optional<Heartbeat> read(int rank) override;
  std::string where() const override;
  int served_by() const override { return served_by_; }

 private:
  std::string key(int rank) const;
  // Runs a request on the store unless an earlier one failed; remembers a failure.
  void request(const std::function<void()>& fn);

  std::shared_ptr<TCPStore> store_;
  std::string prefix_;
  int served_by_;
  std::mutex mu_;     // one request at a time
  std::string down_;  // the first failure, once a request has failed
};

}  // namespace distributed
}  // namespace dpe
