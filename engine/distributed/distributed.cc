// init_process_group, the default group and the helpers: see the design notes in distributed.h.
#include "engine/distributed/distributed.h"

#include <fcntl.h>
#include <gloo/rendezvous/file_store.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <sstream>
#include <vector>

#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/distributed/gloo_process_group.h"
#include "engine/distributed/mpi_process_group.h"
#include "engine/distributed/nccl_process_group.h"
#include "engine/distributed/store_heartbeats.h"
#include "engine/distributed/tcp_store.h"
#include "engine/distributed/watchdog.h"

namespace dpe {
namespace distributed {

namespace {

std::mutex g_mu;
std::shared_ptr<ProcessGroup> g_default;  // the default group (design note "the default group")
int g_local_rank = 0;

int parse_int(const char* name, const char* text) {
  DPE_CHECK(text != nullptr && *text != '\0', "distributed: " << name << " is empty");
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  DPE_CHECK(errno == 0 && *end == '\0' && v >= 0 && v <= (1 << 24),
            "distributed: " << name << "='" << text << "' is not a non-negative integer");
  return static_cast<int>(v);
}

int parse_port(const std::string& name, const std::string& text) {
  const int port = parse_int(name.c_str(), text.c_str());
  DPE_CHECK(port >= 1 && port <= 65535,
            "distributed: " << name << "=" << port << " is outside 1..65535");
  return port;
}

struct Endpoint {
  std::string host;
  int port = 0;
};

// "host:port", "[v6]:port".
Endpoint parse_endpoint(const std::string& text, const std::string& what) {
  const size_t colon = text.rfind(':');
  DPE_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < text.size(),
            "init_process_group: " << what << " '" << text << "' is not host:port");
  Endpoint e;
  e.host = text.substr(0, colon);
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') {
    e.host = e.host.substr(1, e.host.size() - 2);
  }
  e.port = parse_port(what + " port", text.substr(colon + 1));
  return e;
}

// Builds the group of `backend`. With a null store it only checks that the backend can be made
// here (so "nccl" fails fast, before any rendezvous, on a machine without a GPU).
std::shared_ptr<ProcessGroup> make_group(const std::string& backend,
                                         std::shared_ptr<gloo::rendezvous::Store> store,
                                         int world_size, int rank,
                                         std::chrono::milliseconds timeout,
                                         const std::string& prefix, const std::string& hostname,
                                         int local_rank = 0) {
  if (backend == "nccl") {
    const int gpus = Runtime::get().device_count(DeviceType::kCuda);
    DPE_CHECK(gpus > 0,
              "init_process_group: nccl backend requires CUDA devices, and this process "
              "sees none ("
                  << Runtime::get().device_status(DeviceType::kCuda)
                  << "); use backend \"gloo\" for host devices");
    DPE_CHECK(local_rank < gpus, "init_process_group: nccl: local rank "
                                     << local_rank << " has no GPU of its own (" << gpus
                                     << " visible); start at most one process per GPU");
    if (store == nullptr) return nullptr;
    NcclOptions options;
    options.timeout = timeout;
    options.prefix = prefix;
    // One process per GPU, as torchrun: this rank drives cuda:LOCAL_RANK.
    return std::make_shared<NcclProcessGroup>(std::move(store), rank, world_size,
                                              Device(DeviceType::kCuda, local_rank), options);
  }
  if (backend == "mpi") return std::make_shared<MpiProcessGroup>();  // rank and size: MPI's
  DPE_CHECK(backend == "gloo",
            "init_process_group: unknown backend '" << backend << "' (expected gloo, mpi or nccl)");
  DPE_CHECK(world_size >= 1,
            "init_process_group: world_size " << world_size << " must be at least 1");
  DPE_CHECK(rank >= 0 && rank < world_size,
            "init_process_group: rank " << rank << " is outside 0.." << world_size - 1);
  GlooOptions options;
  options.timeout = timeout;
  options.prefix = prefix;
  options.hostname = hostname;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME")) options.iface = iface;
  return std::make_shared<GlooProcessGroup>(std::move(store), rank, world_size, options);
}

std::chrono::milliseconds seconds_from_env(const char* name, std::chrono::milliseconds fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  DPE_CHECK(*text != '\0' && errno == 0 && *end == '\0' && std::isfinite(v) && v > 0 && v <= 1e8,
            "distributed: " << name << "='" << text << "' is not a positive number of seconds");
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(v * 1000)));
}

// Design note "job id" (distributed.h): rank 0 publishes its TORCHELASTIC_RUN_ID and its world
// size in its store; every other rank reads them and throws, naming both values and the store,
// when they differ (a world size of its own would otherwise wait out the rendezvous timeout). The
// job id comes first: a rank of another job is named as one, whatever its world size.
void check_job_id(TCPStore& store, int rank, int world_size, const std::string& host, int port,
                  std::chrono::milliseconds timeout) {
  const char* env = std::getenv("TORCHELASTIC_RUN_ID");
  const std::string mine = env != nullptr ? env : "";
  const std::string key = "rdzv/run_id";
  const std::string size_key = "rdzv/world_size";
  const std::string size = std::to_string(world_size);
  if (rank == 0) {
    store.set(key, std::vector<char>(mine.begin(), mine.end()));
    store.set(size_key, std::vector<char>(size.begin(), size.end()));
    return;
  }
  const std::vector<char> published = store.get(key, timeout);
  const std::string theirs(published.begin(), published.end());
  const auto shown = [](const std::string& id) {
    return id.empty() ? std::string("none (TORCHELASTIC_RUN_ID unset)")
                      : "'" + id.substr(0, 128) + "'";
  };
  DPE_CHECK(theirs == mine, "init_process_group: rank "
                                << rank << " belongs to job " << shown(mine)
                                << " (TORCHELASTIC_RUN_ID, dpe-launch --rdzv-id), but the store at "
                                << host << ":" << port << " serves job " << shown(theirs)
                                << " (rank 0's): a rank of another job, or the wrong endpoint");
  const std::vector<char> value = store.get(size_key, timeout);
  const std::string their_size(value.begin(), value.end());
  DPE_CHECK(their_size == size, "init_process_group: rank "
                                    << rank << " was started with world size " << size
                                    << ", but rank 0 of the store at " << host << ":" << port
                                    << " has world size " << their_size.substr(0, 32)
                                    << " (WORLD_SIZE or the launcher's --nnodes/--nproc-per-node "
                                       "differ between the ranks)");
}

// Design note "rendezvous wait" (distributed.h): returns once every rank has announced itself in
// the store; prints who is missing every `interval`; throws naming them after `timeout`.
void wait_for_ranks(TCPStore& store, const std::string& prefix, int world_size, int rank,
                    std::chrono::milliseconds timeout, std::chrono::milliseconds interval) {
  using Clock = std::chrono::steady_clock;
  const std::string base = "rdzv/" + prefix + "/" + std::to_string(world_size) + "/";
  const int64_t arrival = store.add(base + "count", 1);
  const std::string gen = base + std::to_string((arrival - 1) / world_size) + "/";
  store.set(gen + std::to_string(rank), {'1'});
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto next_log = start + interval;
  const size_t batch = TCPStore::kMaxKeysPerRequest;
  for (int first = 0; first < world_size; first += static_cast<int>(batch)) {
    const int last = std::min<int>(world_size, first + static_cast<int>(batch));
    std::vector<std::string> keys;
    for (int r = first; r < last; ++r) keys.push_back(gen + std::to_string(r));
    while (true) {
      const auto now = Clock::now();
      const auto step = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::max(std::min(deadline, next_log) - now, Clock::duration::zero()));
      if (store.try_wait(keys, step)) break;
      std::vector<int> missing;
      for (int r = 0; r < world_size; ++r) {
        if (!store.check({gen + std::to_string(r)})) missing.push_back(r);
      }
      if (missing.empty()) break;
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start);
      const std::string who = (missing.size() == 1 ? "rank " : "ranks ") + rank_list(missing) +
                              " of " + std::to_string(world_size);
      DPE_CHECK(Clock::now() < deadline, "init_process_group: rendezvous timed out after "
                                             << timeout.count() << " ms: " << who
                                             << (missing.size() == 1 ? " has" : " have")
                                             << " not reached the store at " << store.host() << ":"
                                             << store.port() << " (this is rank " << rank
                                             << "; DPE_RDZV_TIMEOUT sets the timeout in seconds)");
      std::cerr << "init_process_group: rank " << rank << " waiting for " << who << " at "
                << store.host() << ":" << store.port() << " (" << waited.count() << " s of "
                << std::chrono::duration_cast<std::chrono::seconds>(timeout).count() << " s)"
                << std::endl;
      next_log += interval;
    }
  }
}

void set_default(std::shared_ptr<ProcessGroup> group, int local_rank) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_default = std::move(group);
  g_local_rank = local_rank;
}

void check_no_default() {
  std::lock_guard<std::mutex> lock(g_mu);
  DPE_CHECK(g_default == nullptr,
            "init_process_group: the default process group is already initialized (rank "
                << g_default->rank() << " of " << g_default->size()
                << "); call destroy_process_group() first");
}

}  // namespace

std::optional<DistEnv> dist_env_from_env(const std::function<const char*(const char*)>& getenv) {
  const auto get = [&](const char* name) -> const char* {
    return getenv ? getenv(name) : std::getenv(name);
  };
  struct Family {
    const char* source;
    const char* rank;
    const char* size;
    const char* local;
  };
  static const Family kFamilies[] = {
      {"RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
      {"OMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
  };
  for (const Family& f : kFamilies) {
    const char* rank = get(f.rank);
    if (rank == nullptr) continue;
    const char* size = get(f.size);
    DPE_CHECK(size != nullptr, "distributed: " << f.rank << " is set but " << f.size << " is not");
    DistEnv env;
    env.source = f.source;
    env.rank = parse_int(f.rank, rank);
    env.world_size = parse_int(f.size, size);
    const char* local = get(f.local);
    env.local_rank = local != nullptr ? parse_int(f.local, local) : 0;
    DPE_CHECK(env.world_size >= 1, "distributed: " << f.size << "=0 must be at least 1");
    DPE_CHECK(env.rank < env.world_size, "distributed: " << f.rank << "=" << env.rank
                                                         << " is not below " << f.size << "="
                                                         << env.world_size);
    return env;
  }
  return std::nullopt;
}

namespace {

// Design note "collective watchdog" (watchdog.h). Gloo ends a stalled collective itself at the
// timeout; its watchdog names the rank and ends the process only if Gloo has not, this long after.
constexpr std::chrono::seconds kGlooBackstop{60};

// A board for a group whose ranks cannot share one: every reading fails, saying why, so the
// watchdog still bounds the collectives but names no rank.
class NoHeartbeats : public HeartbeatBoard {
 public:
  explicit NoHeartbeats(std::string why) : why_(std::move(why)) {}
  void publish(int, const Heartbeat&) override {}
  std::optional<Heartbeat> read(int) override { DPE_THROW(why_); }
  std::string where() const override { return "no heartbeat board"; }

 private:
  std::string why_;
};

// Gives a Gloo group over a TCPStore its watchdog: heartbeats under `prefix` on a connection of
// their own to the same store (rank 0 serves it).
void attach_gloo_watchdog(ProcessGroup& group, const TCPStore& store, const std::string& prefix,
                          std::chrono::milliseconds timeout) {
  std::shared_ptr<HeartbeatBoard> board;
  try {
    TCPStoreOptions options;
    options.timeout = std::chrono::seconds(30);  // to connect to a server that is already up
    board = std::make_shared<StoreHeartbeats>(
        std::make_shared<TCPStore>(store.host(), store.port(), false, options), prefix);
  } catch (const std::exception& e) {
    std::cerr << "init_process_group (gloo): rank " << group.rank()
              << ": no heartbeats, the watchdog will name no rank: " << e.what() << std::endl;
    board = std::make_shared<NoHeartbeats>(e.what());
  }
  WatchdogOptions wo;
  wo.timeout = timeout;
  wo.expiry = timeout + kGlooBackstop;
  wo.backend = "gloo";
  group.set_watchdog(std::make_shared<Watchdog>(group.rank(), group.size(), board, wo));
}

// 128 random bits as 32 hex digits, from the kernel's generator; empty if it cannot be read.
std::string random_token() {
  unsigned char bytes[16];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const ssize_t k = ::read(fd, bytes, sizeof bytes);
  ::close(fd);
  if (k != static_cast<ssize_t>(sizeof bytes)) return "";
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token.push_back(kHex[b >> 4]);
    token.push_back(kHex[b & 15]);
  }
  return token;
}

// The address the other ranks of an MPI job reach rank 0 at: 127.0.0.1 when every rank is on
// this machine, else MASTER_ADDR when set, else this host's first non-loopback IPv4 address.
std::string mpi_store_address(const ProcessGroup& group) {
  if (group.local_size() == group.size()) return "127.0.0.1";
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') return addr;
  ifaddrs* list = nullptr;
  std::string found;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      char host[NI_MAXHOST];
      if (::getnameinfo(i->ifa_addr, sizeof(sockaddr_in), host, sizeof host, nullptr, 0,
                        NI_NUMERICHOST) == 0 &&
          std::string(host).rfind("127.", 0) != 0) {
        found = host;
      }
    }
    ::freeifaddrs(list);
  }
  DPE_CHECK(!found.empty(), "no non-loopback IPv4 address; set MASTER_ADDR to rank 0's");
  return found;
}

// An MPI job has no store: rank 0 serves one for the watchdog's heartbeats, on a free port and
// with a fresh token, and tells the other ranks where it is through MPI itself (a broadcast), so
// only they can use it. The board says why when that fails (the watchdog then names no rank).
std::shared_ptr<HeartbeatBoard> mpi_heartbeat_board(ProcessGroup& group) {
  constexpr int64_t kBytes = 512;
  Tensor info = Tensor::zeros({kBytes / 8}, DType::kInt64);
  char* bytes = static_cast<char*>(info.raw_data());
  std::shared_ptr<TCPStore> store;
  if (group.rank() == 0) {
    std::string text;
    try {
      const std::string address = mpi_store_address(group);
      const std::string token = random_token();
      DPE_CHECK(!token.empty(), "cannot read /dev/urandom for the store's token");
      TCPStoreOptions options;
      options.token = token;
      options.server.max_connections = size_t(group.size()) + 64;
      // Across hosts rank 0 listens on every interface: the token keeps strangers out.
      const bool local = address == "127.0.0.1";
      store = std::make_shared<TCPStore>(local ? address : "", 0, true, options);
      text = "ok " + address + " " + std::to_string(store->port()) + " " + token;
    } catch (const std::exception& e) {
      text = std::string("error rank 0 cannot serve the heartbeat store: ") + e.what();
    }
    text.resize(std::min<size_t>(text.size(), kBytes - 1));
    std::copy(text.begin(), text.end(), bytes);
  }
  group.broadcast(info, 0);
  const std::string text(bytes, strnlen(bytes, kBytes));
  if (text.rfind("ok ", 0) != 0) return std::make_shared<NoHeartbeats>(text.substr(6));
  char address[256] = {0}, token[128] = {0};
  int port = 0;
  if (std::sscanf(text.c_str(), "ok %255s %d %127s", address, &port, token) != 3) {
    return std::make_shared<NoHeartbeats>("malformed heartbeat store address '" + text + "'");
  }
  if (store == nullptr) {
    try {
      TCPStoreOptions options;
      options.token = std::string(token);
      options.timeout = std::chrono::seconds(10);
      store = std::make_shared<TCPStore>(address, port, false, options);
    } catch (const std::exception& e) {
      std::cerr << "init_process_group (mpi): rank " << group.rank()
                << " cannot reach rank 0's heartbeat store: " << e.what()
                << "; its watchdog still bounds the collectives but names no rank (set "
                   "MASTER_ADDR to rank 0's address)"
                << std::endl;
      return std::make_shared<NoHeartbeats>(e.what());
    }
  }
  return std::make_shared<StoreHeartbeats>(store, "mpi");
}

// This process's local rank from the launcher's variables (LOCAL_RANK, SLURM_LOCALID,
// OMPI_COMM_WORLD_LOCAL_RANK), 0 when none is set.
int env_local_rank() {
  const auto env = dist_env_from_env();
  return env ? env->local_rank : 0;
}

// init_process_group("mpi"): MPI's rank and world size. Explicit ones are ignored with a warning,
// as PyTorch does; a launcher's environment that disagrees with MPI (a job started without mpirun
// is a world of one) is an error.
std::shared_ptr<ProcessGroup> init_mpi_group(int world_size, int rank,
                                             std::chrono::milliseconds timeout) {
  const int mpi_rank = MpiProcessGroup::world_rank(), mpi_size = MpiProcessGroup::world_size();
  if (world_size >= 0 || rank >= 0) {
    std::cerr << "init_process_group: for the mpi backend, world_size (" << world_size
              << ") and rank (" << rank << ") are ignored: MPI assigns them (rank " << mpi_rank
              << " of " << mpi_size << ")\n";
  }
  if (const auto env = dist_env_from_env(); env && env->source != "OMPI") {
    DPE_CHECK(env->world_size == mpi_size && env->rank == mpi_rank,
              "init_process_group (mpi): the environment says rank "
                  << env->rank << " of " << env->world_size << " (" << env->source
                  << " variables) but MPI says rank " << mpi_rank << " of " << mpi_size
                  << "; start the job with mpirun (or srun --mpi=pmix), not tools/dpe-launch");
  }
  auto group = std::make_shared<MpiProcessGroup>();
  // MPI has no timeout of its own and a blocked MPI call cannot be cancelled: the watchdog ends
  // the job (MPI_Abort) once a collective has run for `timeout`.
  WatchdogOptions wo;
  wo.timeout = timeout;
  wo.expiry = timeout;
  wo.backend = "mpi";
  wo.terminate = [] { MpiProcessGroup::abort_job(1); };
  group->set_watchdog(
      std::make_shared<Watchdog>(group->rank(), group->size(), mpi_heartbeat_board(*group), wo));
  return group;
}

}  // namespace

std::chrono::milliseconds rendezvous_timeout(std::chrono::milliseconds timeout) {
  return seconds_from_env("DPE_RDZV_TIMEOUT", timeout);
}

std::chrono::milliseconds rendezvous_log_interval() {
  return seconds_from_env("DPE_RDZV_LOG_INTERVAL", std::chrono::seconds(30));
}

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend,
                                                 const std::string& init_method, int world_size,
                                                 int rank, std::chrono::milliseconds timeout) {
  check_no_default();
  if (backend == "mpi") {
    auto group = init_mpi_group(world_size, rank, timeout);
    set_default(group, env_local_rank());
    return group;
  }
  const auto rdzv_timeout = rendezvous_timeout(timeout);
  const auto log_interval = rendezvous_log_interval();
  const auto env = dist_env_from_env();
  if (world_size < 0 || rank < 0) {
    DPE_CHECK(env.has_value(),
              "init_process_group: rank and world size are unknown: pass them, or set RANK and "
              "WORLD_SIZE (tools/dpe-launch does), or run under srun (SLURM_PROCID) or mpirun "
              "(OMPI_COMM_WORLD_RANK)");
    if (world_size < 0) world_size = env->world_size;
    if (rank < 0) rank = env->rank;
  }
  const int local_rank = env ? env->local_rank : 0;
  // Check the backend before any rendezvous, so "nccl" fails fast and alone.
  if (backend != "gloo") {
    make_group(backend, nullptr, world_size, rank, timeout, "", "", local_rank);
  }

  std::shared_ptr<gloo::rendezvous::Store> store;
  std::string hostname = "127.0.0.1";
  const std::string file_prefix = "file://";
  if (init_method.rfind(file_prefix, 0) == 0) {
    const std::string path = init_method.substr(file_prefix.size());
    DPE_CHECK(!path.empty(),
              "init_process_group: init_method '" << init_method << "' names no path");
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      DPE_THROW("init_process_group: cannot create the store directory " << path << ": "
                                                                         << std::strerror(errno));
    }
    store = std::make_shared<gloo::rendezvous::FileStore>(path);
  } else {
    Endpoint master;
    if (init_method == "env://") {
      const char* addr = std::getenv("MASTER_ADDR");
      const char* port = std::getenv("MASTER_PORT");
      DPE_CHECK(addr != nullptr && *addr != '\0' && port != nullptr,
                "init_process_group: env:// needs MASTER_ADDR and MASTER_PORT (missing: "
                    << (addr == nullptr || *addr == '\0' ? "MASTER_ADDR " : "")
                    << (port == nullptr ? "MASTER_PORT" : "")
                    << "); tools/dpe-launch sets them, or export them yourself");
      master.host = addr;
      master.port = parse_port("MASTER_PORT", port);
    } else if (init_method.rfind("tcp://", 0) == 0) {
      master = parse_endpoint(init_method.substr(6), "init_method");
    } else {
      DPE_THROW("init_process_group: unsupported init_method '"
                << init_method << "' (expected env://, tcp://host:port or file:///path)");
    }
    DPE_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
              "init_process_group: rank " << rank << " is outside 0.." << world_size - 1);
    TCPStoreOptions options;
    options.timeout = rdzv_timeout;
    options.progress_period = log_interval;
    // One connection per rank, plus room for tools that look in.
    // Two connections per rank (its own and its watchdog's), plus room for tools that look in.
    options.server.max_connections =
        std::max<size_t>(options.server.max_connections, 2 * size_t(world_size) + 64);
    auto tcp = std::make_shared<TCPStore>(master.host, master.port, rank == 0, options);
    // Before registering: a rank of another job must not count as one of this job's.
    check_job_id(*tcp, rank, world_size, master.host, master.port, rdzv_timeout);
    tcp->register_rank(rank);
    wait_for_ranks(*tcp, "default_pg", world_size, rank, rdzv_timeout, log_interval);
    hostname = local_address_toward(master.host);
    store = tcp;
  }
  auto group =
      make_group(backend, store, world_size, rank, timeout, "default_pg", hostname, local_rank);
  if (auto tcp = std::dynamic_pointer_cast<TCPStore>(store); tcp && backend == "gloo") {
    attach_gloo_watchdog(*group, *tcp, "default_pg", timeout);
  }
  set_default(group, local_rank);
  return group;
}

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend,
                                                 std::shared_ptr<gloo::rendezvous::Store> store,
                                                 int world_size, int rank,
                                                 std::chrono::milliseconds timeout) {
  check_no_default();
  DPE_CHECK(store != nullptr, "init_process_group: no store");
  std::string hostname = "127.0.0.1";
  if (auto tcp = std::dynamic_pointer_cast<TCPStore>(store)) {
    DPE_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
              "init_process_group: rank " << rank << " is outside 0.." << world_size - 1);
    tcp->register_rank(rank);
    wait_for_ranks(*tcp, "default_pg", world_size, rank, rendezvous_timeout(timeout),
                   rendezvous_log_interval());
    hostname = local_address_toward(tcp->host());
  }
  const int local_rank = env_local_rank();
  auto tcp = std::dynamic_pointer_cast<TCPStore>(store);
  auto group = make_group(backend, std::move(store), world_size, rank, timeout, "default_pg",
                          hostname, local_rank);
  if (tcp && backend == "gloo") attach_gloo_watchdog(*group, *tcp, "default_pg", timeout);
  set_default(group, local_rank);
  return group;
}

std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend,
                                                std::shared_ptr<gloo::rendezvous::Store> store,
                                                int world_size, int rank,
                                                std::chrono::milliseconds timeout,
                                                const std::string& prefix) {
  DPE_CHECK(store != nullptr, "new_process_group: no store");
  std::string hostname = "127.0.0.1";
  if (auto tcp = std::dynamic_pointer_cast<TCPStore>(store)) {
    hostname = local_address_toward(tcp->host());
  }
  auto tcp = std::dynamic_pointer_cast<TCPStore>(store);
  auto group = make_group(backend, std::move(store), world_size, rank, timeout, prefix, hostname,
                          env_local_rank());
  if (tcp && backend == "gloo") attach_gloo_watchdog(*group, *tcp, prefix, timeout);
  return group;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_default != nullptr;
}

std::shared_ptr<ProcessGroup> default_group() {
  std::lock_guard<std::mutex> lock(g_mu);
  DPE_CHECK(g_default != nullptr,
            "distributed: the default process group is not initialized; call "
            "init_process_group() first");
  return g_default;
}

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    group = std::move(g_default);
    g_default.reset();
  }
  // Destroyed outside the lock: the group joins its communication thread.
  group.reset();
}

int get_rank() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_default ? g_default->rank() : 0;
}

int get_world_size() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_default ? g_default->size() : 1;
}

int get_local_rank() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_default) return g_local_rank;
  }
  return env_local_rank();
}

bool is_main_process() { return get_rank() == 0; }

void barrier() {
  std::shared_ptr<ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    group = g_default;
  }
  if (group) group->barrier();
}

Tensor reduce_value(Tensor value, bool average) {
  std::shared_ptr<ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    group = g_default;
  }
  if (!group || group->size() < 2) return value;
  group->all_reduce(value, average ? ReduceOp::kAvg : ReduceOp::kSum);
  value.bump_version();
  return value;
}

}  // namespace distributed
}  // namespace dpe
