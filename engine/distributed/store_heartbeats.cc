// StoreHeartbeats: heartbeats as keys of a TCPStore (store_heartbeats.h).
#include "engine/distributed/store_heartbeats.h"

#include <chrono>

#include "engine/core/error.h"
#include "engine/distributed/tcp_store.h"

namespace dpe {
namespace distributed {

StoreHeartbeats::StoreHeartbeats(std::shared_ptr<TCPStore> store, std::string prefix, int served_by)
    : store_(std::move(store)), prefix_(std::move(prefix)), served_by_(served_by) {
  DPE_CHECK(store_ != nullptr, "StoreHeartbeats: no store");
}

std::string StoreHeartbeats::key(int rank) const {
  return "watchdog/" + prefix_ + "/" + std::to_string(rank);
}

void StoreHeartbeats::request(const std::function<void()>& fn) {
  // Held across the request, so a request queued behind one that fails sees it fail.
  std::lock_guard<std::mutex> lock(mu_);
  if (!down_.empty()) DPE_THROW(down_);
  try {
    fn();
  } catch (const std::exception& e) {
    down_ = e.what();
    throw;
  }
}

void StoreHeartbeats::publish(int rank, const Heartbeat& h) {
  const std::string text = encode_heartbeat(h);
  request([&] { store_->set(key(rank), std::vector<char>(text.begin(), text.end())); });
}

std::optional<Heartbeat> StoreHeartbeats::read(int rank) {
  const std::string k = key(rank);
  std::optional<Heartbeat> h;
  request([&] {
    if (!store_->check({k})) return;
    const std::vector<char> value = store_->get(k, std::chrono::milliseconds(1000));
    h = decode_heartbeat(std::string(value.begin(), value.end()));
  });
  return h;
}

std::string StoreHeartbeats::where() const {
  return "the store at " + store_->host() + ":" + std::to_string(store_->port());
}

}  // namespace distributed
}  // namespace dpe
