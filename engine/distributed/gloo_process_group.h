// GlooProcessGroup: ProcessGroup on Gloo's TCP transport for tensors on host devices. Ranks
// rendezvous through a gloo::rendezvous::Store (TCPStore or FileStore) under a key prefix, then run
// ring all-reduce, broadcast, all-gather and barrier on the group's communication thread.
//
// A dead or silent peer never hangs a rank: Gloo reports a closed connection at once and a silent
// peer after the group's timeout; both become a dpe::Error naming the op, this rank and, when the
// store is a TCPStore (which tracks which ranks' connections dropped), the rank that was lost.
//
// Side effect: the first group sets SIGPIPE to SIG_IGN when it has its default action (Gloo writes
// to sockets without MSG_NOSIGNAL), as Python does for PyTorch.
//
// Threading contract: as ProcessGroup (process_group.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/distributed/process_group.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace dpe {
namespace distributed {

struct GlooOptions {
  // Bounds rendezvous and every collective (Gloo's context timeout).
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // The local address Gloo listens on; peers must reach it. local_address_toward(MASTER_ADDR)
  // gives the address of the interface that routes to the master.
  std::string hostname = "127.0.0.1";
  // A network interface name (GLOO_SOCKET_IFNAME); overrides hostname when set.
  std::string iface;
  // Keys of this group in the store, so several groups can share one store.
  std::string prefix = "default_pg";
  // Lists ranks known to be gone; used to name the lost rank in errors. Defaults to the
  // TCPStore's lost_ranks() when the store is a TCPStore.
  std::function<std::vector<int>()> lost_ranks;
};

class GlooProcessGroup : public ProcessGroup {
 public:
  // Rendezvous with the other size-1 ranks through `store`; blocks until all have arrived or the
  // timeout has passed (dpe::Error).
  GlooProcessGroup(std::shared_ptr<gloo::rendezvous::Store> store, int rank, int size,
                   GlooOptions options = {});
  ~GlooProcessGroup() override;

  std::string backend() const override { return "gloo"; }

 protected:
  void run_all_reduce(Tensor& tensor, ReduceOp op) override;
  void run_broadcast(Tensor& tensor, int root) override;
  void run_all_gather(const Tensor& input, Tensor& gathered) override;
  void run_barrier() override;
  // A dpe::Error from a raw collective is a usage error and leaves the group usable; any other
  // exception comes from Gloo (a lost or silent peer): it breaks the group, and the message names
  // the lost rank when the store knows it.
  Failure describe_failure(const std::string& op, const std::exception& e) override;

 private:
  std::string describe_lost_peer(const std::string& op, const std::string& what);

  GlooOptions options_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t next_tag_ = 0;  // used on the communication thread only
};

// The address of the local interface that routes to `host` (no packet is sent). "127.0.0.1" for
// a loopback host. Throws dpe::Error when `host` cannot be resolved.
std::string local_address_toward(const std::string& host);

}  // namespace distributed
}  // namespace dpe
