// GlooProcessGroup: Gloo collectives on the group's communication thread.
#include "engine/distributed/gloo_process_group.h"

#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "engine/core/error.h"
#include "engine/distributed/reduce_ops.h"
#include "engine/distributed/tcp_store.h"
#include "engine/distributed/watchdog.h"

namespace dpe {
namespace distributed {

namespace {

// Gloo's reduce function: reduce_ops.h's for one op (16-bit floats combined in float32).
template <typename T, ReduceOp Op>
void reduce_with(void* out, const void* a, const void* b, size_t n) {
  reduce_elements(Op, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
}

template <typename T>
gloo::AllreduceOptions::Func reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return &reduce_with<T, ReduceOp::kMax>;
    case ReduceOp::kMin: return &reduce_with<T, ReduceOp::kMin>;
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return &reduce_with<T, ReduceOp::kSum>;  // kAvg: divided afterwards
  }
  return &reduce_with<T, ReduceOp::kSum>;
}

template <typename T>
void run_allreduce(const std::shared_ptr<gloo::Context>& ctx, T* data, size_t n, ReduceOp op,
                   uint32_t tag) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(data, n);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setReduceFunction(reduce_fn<T>(op));
  opts.setTag(tag);
  gloo::allreduce(opts);
}

// "5 s", "1.5 s".
std::string format_seconds(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms.count()) / 1000);
  return text;
}

}  // namespace

std::string local_address_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &res);
  DPE_CHECK(rc == 0,
            "distributed: cannot resolve MASTER_ADDR '" << host << "': " << gai_strerror(rc));
  std::string result;
  for (addrinfo* ai = res; ai != nullptr && result.empty(); ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // connect() on a UDP socket only picks the route and the local address; nothing is sent.
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      char buf[INET6_ADDRSTRLEN] = {0};
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
        const void* addr =
            ss.ss_family == AF_INET6
                ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
        if (::inet_ntop(ss.ss_family, addr, buf, sizeof(buf)) != nullptr) result = buf;
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  DPE_CHECK(!result.empty(), "distributed: no local interface routes to '" << host << "'");
  return result;
}

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<gloo::rendezvous::Store> store, int rank,
                                   int size, GlooOptions options)
    : ProcessGroup(rank, size), options_(std::move(options)), store_(std::move(store)) {
  DPE_CHECK(store_ != nullptr, "GlooProcessGroup (rank " << rank << "): no store");
  if (!options_.lost_ranks) {
    if (auto tcp = std::dynamic_pointer_cast<TCPStore>(store_)) {
      std::weak_ptr<TCPStore> weak = tcp;
      options_.lost_ranks = [weak] {
        auto s = weak.lock();
        return s ? s->lost_ranks() : std::vector<int>{};
      };
    }
  }
  // Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died would kill this process
  // with SIGPIPE instead of surfacing as an error. Python (hence PyTorch) ignores SIGPIPE too;
  // a handler the program installed itself is left alone.
  struct sigaction old_action {};
  if (::sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
  gloo::transport::tcp::attr attr;
  if (!options_.iface.empty()) {
    attr.iface = options_.iface;
  } else {
    attr.hostname = options_.hostname;
  }
  try {
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(options_.timeout);
    gloo::rendezvous::PrefixStore prefixed(options_.prefix, *store_);
    context->connectFullMesh(prefixed, device_);
    context_ = std::move(context);
  } catch (const Error& e) {
    DPE_THROW("init_process_group (gloo, rank " << rank << " of " << size
                                                << "): rendezvous failed: " << e.what());
  } catch (const std::exception& e) {
    DPE_THROW("init_process_group (gloo, rank "
              << rank << " of " << size << "): rendezvous failed within "
              << options_.timeout.count() << " ms on "
              << (options_.iface.empty() ? options_.hostname : options_.iface) << ": " << e.what());
  }
  start_communication();
}

GlooProcessGroup::~GlooProcessGroup() { stop_communication(); }

ProcessGroup::Failure GlooProcessGroup::describe_failure(const std::string& op,
                                                         const std::exception& e) {
  if (dynamic_cast<const Error*>(&e) != nullptr) return Failure{false, ""};
  return Failure{true, describe_lost_peer(op, e.what())};
}

std::string GlooProcessGroup::describe_lost_peer(const std::string& op, const std::string& what) {
  std::ostringstream out;
  out << "gloo " << op << " (rank " << rank_ << " of " << size_ << "): ";
  const bool timed_out =
      what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos;
  if (timed_out && watchdog() != nullptr) {
    // Design note "collective watchdog" (watchdog.h): the heartbeats name who holds it up.
    out << "collective #" << watchdog()->in_flight() << " timed out after "
        << format_seconds(options_.timeout) << " (the group's timeout): " << watchdog()->diagnose()
        << " [gloo: " << what << "]";
    return out.str();
  }
  std::vector<int> lost;
  bool store_gone = false;
  if (options_.lost_ranks) {
    // The store's server notices a dead process's closed socket about as fast as Gloo does;
    // give it a moment so the lost rank can be named.
    for (int attempt = 0; attempt < 20 && lost.empty() && !store_gone; ++attempt) {
      try {
        lost = options_.lost_ranks();
      } catch (const std::exception&) {
        store_gone = true;  // the store lives in rank 0's process
      }
      if (lost.empty() && !store_gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  lost.erase(std::remove(lost.begin(), lost.end(), rank_), lost.end());
  if (!lost.empty()) {
    out << "lost connection to rank";
    if (lost.size() > 1) out << "s";
    for (size_t i = 0; i < lost.size(); ++i) out << (i ? ", " : " ") << lost[i];
  } else if (store_gone && rank_ != 0) {
    out << "lost connection to rank 0 (its store is gone too)";
  } else if (timed_out) {
    out << "timed out after " << options_.timeout.count() << " ms waiting for a peer";
  } else {
    out << "lost connection to a peer";
  }
  out << " [gloo: " << what << "]";
  return out.str();
}

void GlooProcessGroup::run_all_reduce(Tensor& tensor, ReduceOp op) {
  const size_t n = static_cast<size_t>(tensor.numel());
  if (n == 0) return;
  const uint32_t tag = next_tag_++;
  if (size_ > 1) {
    switch (tensor.dtype()) {
      case DType::kFloat32: run_allreduce(context_, tensor.data<float>(), n, op, tag); break;
      case DType::kInt64: run_allreduce(context_, tensor.data<int64_t>(), n, op, tag); break;
      case DType::kBFloat16: run_allreduce(context_, tensor.data<BFloat16>(), n, op, tag); break;
      case DType::kFloat16: run_allreduce(context_, tensor.data<Float16>(), n, op, tag); break;
    }
  }
  if (op == ReduceOp::kAvg) divide_by_size(tensor);
}

void GlooProcessGroup::run_broadcast(Tensor& tensor, int root) {
  if (size_ == 1 || tensor.numel() == 0) return;
  gloo::BroadcastOptions opts(context_);
  char* data = static_cast<char*>(tensor.raw_data());
  const size_t bytes = tensor.nbytes();
  if (rank_ == root) opts.setInput(data, bytes);
  opts.setOutput(data, bytes);
  opts.setRoot(root);
  opts.setTag(next_tag_++);
  gloo::broadcast(opts);
}

void GlooProcessGroup::run_all_gather(const Tensor& input, Tensor& gathered) {
  const size_t bytes = input.nbytes();
  if (bytes == 0) return;
  if (size_ == 1) {
    std::memcpy(gathered.raw_data(), input.raw_data(), bytes);
    return;
  }
  gloo::AllgatherOptions opts(context_);
  opts.setInput(static_cast<char*>(input.raw_data()), bytes);
  opts.setOutput(static_cast<char*>(gathered.raw_data()), gathered.nbytes());
  opts.setTag(next_tag_++);
  gloo::allgather(opts);
}

void GlooProcessGroup::run_barrier() {
  if (size_ == 1) return;
  gloo::BarrierOptions opts(context_);
  opts.setTag(next_tag_++);
  gloo::barrier(opts);
}

}  // namespace distributed
}  // namespace dpe
