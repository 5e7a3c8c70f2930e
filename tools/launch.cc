// launch: torchrun for dpe programs. Starts --nproc_per_node workers of a program with RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, prefixes their output
// lines with their rank, and stops them all when one fails (or when the launcher is interrupted).
//
//   tools/dpe-launch --nproc_per_node=2 bazel-bin/tools/train --epochs 3
//   tools/dpe-launch --standalone --nproc-per-node=2 bazel-bin/tools/train --mode ddp
//
// Rendezvous is torchrun's "static" backend: rank 0 serves the store at --rdzv-endpoint (or
// --master-addr:--master-port), every node says which it is with --node-rank. --standalone picks
// a free port on 127.0.0.1 and a fresh job id for one node. --rdzv-id names the job: the workers
// get it as TORCHELASTIC_RUN_ID, and init_process_group refuses a rank whose id differs from rank
// 0's (design note "job id" in engine/distributed/distributed.h).
//
// Workers die with their launcher: each is sent SIGKILL when the launcher ends, however it ends
// (PR_SET_PDEATHSIG), kill -9 included. Unless DPE_STORE_TOKEN is already set, the launcher gives
// its workers a fresh random one, so only they can use the rendezvous store (README, "The
// rendezvous store: threat model"); --rdzv-timeout sets their DPE_RDZV_TIMEOUT.
//
// Exit status (tools/common/exit_codes.h): 0 when every worker exited with 0; 2 for a bad launcher
// flag; 127 for a program that cannot be run (not found, not executable: said once, before any
// worker starts, as a shell says it); otherwise the exit code of the first worker that failed
// (128 + signal for a worker killed by a signal), or 128 + the signal that stopped the launcher.
// With --max-restarts N (torchrun's), a failure stops the other workers and starts them all
// again, up to N times (the workers see TORCHELASTIC_RESTART_COUNT); the code is then that of the
// last round's first failure. A stopped worker (SIGSTOP) gets SIGCONT after SIGTERM.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tools/common/bool_flag.h"
#include "tools/common/exit_codes.h"
#include "tools/common/local_ranks.h"

namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  const int saved = errno;
  (void)!::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

struct Stream {
  int fd = -1;
  std::string partial;  // bytes after the last newline
  FILE* out = nullptr;  // the launcher's stdout or stderr
};

struct Worker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
  Stream streams[2];
};

void emit(const std::string& prefix, const char* data, size_t n, FILE* out) {
  std::fwrite(prefix.data(), 1, prefix.size(), out);
  std::fwrite(data, 1, n, out);
  std::fflush(out);
}

// Writes each complete line of `s.partial` + `data` with the worker's prefix.
void forward(const Worker& w, Stream& s, const char* data, size_t n) {
  const std::string prefix = "[rank" + std::to_string(w.rank) + "]: ";
  s.partial.append(data, n);
  size_t start = 0;
  while (true) {
    const size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos) break;
    emit(prefix, s.partial.data() + start, nl + 1 - start, s.out);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  // A line longer than this is passed on in pieces rather than buffered without bound.
  if (s.partial.size() > (1 << 16)) {
    emit(prefix, s.partial.data(), s.partial.size(), s.out);
    emit("", "\n", 1, s.out);
    s.partial.clear();
  }
}

void close_stream(const Worker& w, Stream& s) {
  if (s.fd < 0) return;
  if (!s.partial.empty()) {
    s.partial.push_back('\n');
    const std::string rest = std::move(s.partial);
    s.partial.clear();
    forward(w, s, rest.data(), rest.size());
  }
  ::close(s.fd);
  s.fd = -1;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "ended with status " + std::to_string(status);
}

// A finite number from lo to hi (CLI::Range lets nan through: every comparison with it is false).
CLI::Validator finite_range(double lo, double hi) {
  char bounds[64];
  std::snprintf(bounds, sizeof bounds, "%g to %g", lo, hi);
  const std::string shown = bounds;
  return CLI::Validator(
      [lo, hi, shown](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (!text.empty() && *end == '\0' && std::isfinite(v) && v >= lo && v <= hi) return "";
        return "'" + text + "' is not a number from " + shown;
      },
      "NUMBER in " + shown);
}

// 128 random bits as 32 hex digits, from the kernel's generator; empty if it cannot be read.
std::string random_token() {
  unsigned char bytes[16];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t k = ::read(fd, bytes + got, sizeof bytes - got);
    if (k <= 0 && errno != EINTR) break;
    if (k > 0) got += static_cast<size_t>(k);
  }
  ::close(fd);
  if (got < sizeof bytes) return "";
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token.push_back(kHex[b >> 4]);
    token.push_back(kHex[b & 15]);
  }
  return token;
}

using Clock = std::chrono::steady_clock;
using dpe::tools::kExitFailure;
using dpe::tools::kExitOk;
using dpe::tools::kExitUsage;

// parse_options' answer when the launcher goes on to start the workers.
constexpr int kRun = -1;

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double grace_s = 5.0;
  int max_restarts = 0;              // restarts of the whole group after a failure (torchrun's)
  std::string rdzv_timeout;          // the workers' DPE_RDZV_TIMEOUT; empty: left as it is
  std::string rdzv_id;               // the workers' TORCHELASTIC_RUN_ID; empty: left as it is
  std::vector<std::string> command;  // the program and its arguments
};

// The flags of the rendezvous as given, before parse_options turns them into master_addr,
// master_port and rdzv_id.
struct RendezvousFlags {
  bool standalone = false;
  std::string endpoint;
  std::string backend = "static";
  CLI::Option* endpoint_option = nullptr;
  CLI::Option* id_option = nullptr;
  CLI::Option* backend_option = nullptr;
  CLI::Option* addr_option = nullptr;
  CLI::Option* port_option = nullptr;
};

// "HOST:PORT", "HOST" (the port stays `*port`), "[IPv6]:PORT" or "[IPv6]" into `*host` and
// `*port`; false, said in `*why`, when it is none of those.
bool parse_endpoint(const std::string& text, std::string* host, int* port, std::string* why) {
  std::string h = text, p;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close == 1) {
      *why = "an IPv6 address goes in brackets: [::1]:29500";
      return false;
    }
    h = text.substr(1, close - 1);
    const std::string rest = text.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') {
      *why = "expected ':PORT' after ']'";
      return false;
    }
    if (!rest.empty()) p = rest.substr(1);
    if (!rest.empty() && p.empty()) {
      *why = "no port after ':'";
      return false;
    }
  } else {
    const size_t colon = text.find(':');
    if (colon != std::string::npos && text.find(':', colon + 1) != std::string::npos) {
      *why = "an IPv6 address goes in brackets: [" + text + "]:29500";
      return false;
    }
    if (colon != std::string::npos) {
      h = text.substr(0, colon);
      p = text.substr(colon + 1);
      if (p.empty()) {
        *why = "no port after ':'";
        return false;
      }
    }
  }
  if (h.empty()) {
    *why = "no host";
    return false;
  }
  if (!p.empty()) {
    char* end = nullptr;
    const long v = std::strtol(p.c_str(), &end, 10);
    if (!std::isdigit(static_cast<unsigned char>(p[0])) || *end != '\0' || v < 1 || v > 65535) {
      *why = "port '" + p + "' is not a number from 1 to 65535";
      return false;
    }
    *port = static_cast<int>(v);
  }
  *host = h;
  return true;
}

// A job id: 1 to 128 printable characters (it travels in the environment and in messages).
bool valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char ch : id) {
    if (!std::isprint(static_cast<unsigned char>(ch))) return false;
  }
  return true;
}

// Turns the rendezvous flags into o.master_addr, o.master_port and o.rdzv_id. Returns kRun, or
// kExitUsage after saying on stderr what does not fit; kExitFailure when no free port is found.
int resolve_rendezvous(const RendezvousFlags& f, Options& o) {
  if (f.standalone) {
    // torchrun --standalone: one node, a local endpoint on a free port, a fresh id; the
    // rendezvous flags given beside it are ignored, as torchrun ignores them.
    if (o.nnodes != 1) {
      std::cerr << "dpe-launch: --standalone is one node, not --nnodes " << o.nnodes << "\n";
      return kExitUsage;
    }
    for (const CLI::Option* given :
         {f.endpoint_option, f.id_option, f.backend_option, f.addr_option, f.port_option}) {
      if (given->count() > 0) {
        std::cerr << "dpe-launch: --standalone picks the rendezvous itself; ignoring "
                  << given->get_name() << "\n";
      }
    }
    o.master_addr = "127.0.0.1";
    try {
      o.master_port = dpe::tools::free_local_port();
    } catch (const std::exception& e) {
      std::cerr << "dpe-launch: --standalone: " << e.what() << "\n";
      return kExitFailure;
    }
    o.rdzv_id = random_token();
    if (o.rdzv_id.empty()) {
      std::cerr << "dpe-launch: cannot read /dev/urandom for the job id: " << std::strerror(errno)
                << "\n";
      return kExitFailure;
    }
    return kRun;
  }
  if (f.backend != "static" && f.backend != "c10d") {
    std::cerr << "dpe-launch: --rdzv-backend " << f.backend
              << " is not supported: dpe-launch's rendezvous is static (rank 0 serves the store "
                 "at --rdzv-endpoint, each node gives --node-rank); use --rdzv-backend static\n";
    return kExitUsage;
  }
  if (f.backend == "c10d" && o.nnodes > 1) {
    // On one node c10d and static give the same ranks; across nodes c10d assigns node ranks as
    // the nodes arrive, which this launcher does not.
    std::cerr << "dpe-launch: --rdzv-backend c10d with --nnodes " << o.nnodes
              << ": dpe-launch has no dynamic rendezvous (node ranks given as nodes arrive); give "
                 "each node its --node-rank and use --rdzv-backend static\n";
    return kExitUsage;
  }
  if (f.endpoint_option->count() > 0) {
    if (f.addr_option->count() > 0 || f.port_option->count() > 0) {
      std::cerr << "dpe-launch: --rdzv-endpoint sets the master's address and port: give it or "
                   "--master-addr/--master-port, not both\n";
      return kExitUsage;
    }
    std::string why;
    if (!parse_endpoint(f.endpoint, &o.master_addr, &o.master_port, &why)) {
      std::cerr << "dpe-launch: --rdzv-endpoint '" << f.endpoint << "' is not HOST[:PORT]: " << why
                << "\n";
      return kExitUsage;
    }
  }
  if (f.id_option->count() > 0 && !valid_run_id(o.rdzv_id)) {
    std::cerr << "dpe-launch: --rdzv-id must be 1 to 128 printable characters\n";
    return kExitUsage;
  }
  return kRun;
}

// Reads the command line into `o`. Returns kRun, or the exit code when there is nothing to run
// (--help, or a bad flag: CLI11 or the launcher has printed why).
int parse_options(int argc, char** argv, Options& o) {
  CLI::App app{
      "dpe-launch: starts one process per device, like torchrun.\n"
      "Usage: dpe-launch [options] program [program arguments...]"};
  double rdzv_timeout_s = 0;
  RendezvousFlags rdzv;
  app.add_option("--nproc_per_node,--nproc-per-node", o.nproc_per_node,
                 "processes (workers) on this node, one per device: a COUNT")
      ->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", o.nnodes, "number of nodes")->check(CLI::Range(1, 1 << 16));
  app.add_option("--node_rank,--node-rank", o.node_rank, "rank of this node, 0..nnodes-1")
      ->check(CLI::NonNegativeNumber);
  rdzv.addr_option =
      app.add_option("--master_addr,--master-addr", o.master_addr,
                     "address of the node that runs rank 0 (it serves the rendezvous store)");
  rdzv.port_option =
      app.add_option("--master_port,--master-port", o.master_port, "port of the rendezvous store")
          ->check(CLI::Range(1, 65535));
  dpe::tools::add_switch(
      app, "--standalone", rdzv.standalone,
      "one node: the store on 127.0.0.1 at a port the kernel says is free, a fresh "
      "--rdzv-id (as torchrun --standalone; rendezvous flags beside it are ignored)");
  rdzv.endpoint_option = app.add_option(
      "--rdzv-endpoint,--rdzv_endpoint", rdzv.endpoint,
      "HOST[:PORT] where rank 0 serves the rendezvous store: the workers' MASTER_ADDR and "
      "MASTER_PORT (an IPv6 address in brackets, [::1]:29500; no port: --master-port's). "
      "Instead of --master-addr and --master-port");
  rdzv.id_option = app.add_option(
      "--rdzv-id,--rdzv_id", o.rdzv_id,
      "the job's id, given alike to every node: the workers get it as TORCHELASTIC_RUN_ID, and "
      "a rank whose id differs from rank 0's fails at the rendezvous, naming both");
  rdzv.backend_option = app.add_option(
      "--rdzv-backend,--rdzv_backend", rdzv.backend,
      "static (the default): rank 0 serves the store and each node gives --node-rank; c10d is "
      "taken on one node, where it gives the same ranks; nothing else");
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "when a worker fails, stop the others and start every worker again, up to this "
                 "many times (torchrun's; the workers see TORCHELASTIC_RESTART_COUNT); a program "
                 "that resumes from its checkpoint (train --resume auto) then finishes the job")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--grace", o.grace_s,
                 "seconds the other workers get after SIGTERM, once one has failed, before "
                 "SIGKILL")
      ->check(finite_range(0, 3600));
  CLI::Option* rdzv_timeout =
      app.add_option("--rdzv-timeout,--rdzv_timeout", rdzv_timeout_s,
                     "seconds the workers wait for each other at the rendezvous (sets their "
                     "DPE_RDZV_TIMEOUT; default: that variable, else 30 minutes)")
          ->check(finite_range(0.001, 1e8));
  // Everything from the program on is the program's: its flags are not the launcher's.
  app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? kExitOk : kExitUsage;
  }
  o.command = app.remaining();
  if (o.command.empty()) {
    std::cerr << "dpe-launch: no program given\n" << app.help();
    return kExitUsage;
  }
  // CLI11 hands an unknown flag before the program on as the program; torchrun refuses it.
  if (o.command[0].size() > 1 && o.command[0][0] == '-') {
    std::cerr << "dpe-launch: " << o.command[0]
              << " is not a dpe-launch flag (--help lists them); the program's flags go after "
                 "the program\n";
    return kExitUsage;
  }
  if (o.node_rank >= o.nnodes) {
    std::cerr << "dpe-launch: --node_rank " << o.node_rank << " must be below --nnodes " << o.nnodes
              << "\n";
    return kExitUsage;
  }
  if (const int code = resolve_rendezvous(rdzv, o); code != kRun) return code;
  if (o.max_restarts > 0 && o.nnodes > 1) {
    // Every node would have to restart together; the static rendezvous cannot make them.
    std::cerr << "dpe-launch: --max-restarts needs one node: with --nnodes " << o.nnodes
              << " the nodes' launchers cannot restart their workers together (static "
                 "rendezvous)\n";
    return kExitUsage;
  }
  if (rdzv_timeout->count() > 0) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", rdzv_timeout_s);
    o.rdzv_timeout = text;
  }
  return kRun;
}

// The DPE_STORE_TOKEN to give the workers, in `*token`: empty when they keep their own. One node,
// no token given: a fresh secret for this job's store. Several nodes must share one, so there the
// user sets DPE_STORE_TOKEN (the launchers of different nodes cannot agree on a random one).
// False, said on stderr, when the kernel's generator cannot be read.
bool make_store_token(int nnodes, std::string* token) {
  if (const char* t = std::getenv("DPE_STORE_TOKEN"); t == nullptr && nnodes == 1) {
    *token = random_token();
    if (token->empty()) {
      std::fprintf(stderr, "dpe-launch: cannot read /dev/urandom for DPE_STORE_TOKEN: %s\n",
                   std::strerror(errno));
      return false;
    }
  }
  return true;
}

// Whether `program` can be run as execvp would run it: a path (it holds a '/') to an executable
// file, or the name of one on PATH. False, with `*why` saying why as a shell would, otherwise.
bool runnable(const std::string& program, std::string* why) {
  auto executable = [](const std::string& path, int* err) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      *err = errno;
      return false;
    }
    *err = S_ISDIR(st.st_mode) ? EISDIR : ::access(path.c_str(), X_OK) == 0 ? 0 : errno;
    return *err == 0;
  };
  int err = 0;
  if (program.find('/') != std::string::npos) {
    if (executable(program, &err)) return true;
    *why = std::string(std::strerror(err)) + (err == ENOENT ? " (not found)" : "");
    return false;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end == start ? "." : dirs.substr(start, end - start);
    if (executable(dir + "/" + program, &err)) return true;
    start = end + 1;
  }
  *why = "not found on PATH";
  return false;
}

// Under `bazel run`, paths on the command line (the program, its files) are the user's.
void enter_user_directory() {
  if (const char* wd = std::getenv("BUILD_WORKING_DIRECTORY"); wd != nullptr && *wd != '\0') {
    if (::chdir(wd) != 0) std::perror("dpe-launch: chdir to BUILD_WORKING_DIRECTORY");
  }
}

// SIGINT, SIGTERM and SIGCHLD become bytes on g_signal_pipe, read by the supervising loop.
bool install_signal_handlers() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::perror("dpe-launch: pipe");
    return false;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGCHLD, &sa, nullptr);
  return true;
}

// What every worker of this node is started with.
struct Job {
  Options options;
  int world_size = 1;
  int restart_count = 0;           // TORCHELASTIC_RESTART_COUNT: the round of workers
  std::string threads_per_worker;  // DPE_HOST_THREADS
  std::string store_token;         // DPE_STORE_TOKEN; empty: the inherited one
};

// The child's side of the fork: becomes worker `w` running the job's program; never returns.
[[noreturn]] void exec_worker(const Job& job, const Worker& w, int out_fd, int err_fd,
                              pid_t launcher_pid, const sigset_t& mask) {
  const Options& o = job.options;
  // Die with the launcher, kill -9 included. The launcher may have died between fork and
  // prctl, before the signal was armed: then this process was already re-parented.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != launcher_pid) ::_exit(1);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGINT, &dfl, nullptr);
  ::sigaction(SIGTERM, &dfl, nullptr);
  ::sigaction(SIGCHLD, &dfl, nullptr);
  // Only now, with the launcher's handlers gone, may a signal arrive: a SIGTERM sent right after
  // fork stops this worker rather than reaching the launcher's pipe as its own.
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  ::setenv("RANK", std::to_string(w.rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(w.local_rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(job.world_size).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node).c_str(), 1);
  ::setenv("GROUP_RANK", std::to_string(o.node_rank).c_str(), 1);
  ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(o.master_port).c_str(), 1);
  // Each worker drives one host device; several workers on one node share its cores.
  ::setenv("DPE_HOST_DEVICES", "1", 0);
  ::setenv("DPE_HOST_THREADS", job.threads_per_worker.c_str(), 0);
  if (o.nproc_per_node > 1) ::setenv("OMP_NUM_THREADS", "1", 0);
  if (!job.store_token.empty()) ::setenv("DPE_STORE_TOKEN", job.store_token.c_str(), 0);
  if (!o.rdzv_timeout.empty()) ::setenv("DPE_RDZV_TIMEOUT", o.rdzv_timeout.c_str(), 1);
  if (!o.rdzv_id.empty()) ::setenv("TORCHELASTIC_RUN_ID", o.rdzv_id.c_str(), 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(job.restart_count).c_str(), 1);
  ::setenv("TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts).c_str(), 1);
  std::vector<char*> args;
  // execvp does not write through argv; its signature predates const.
  for (const auto& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "dpe-launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
  std::fflush(stderr);
  ::_exit(127);
}

// Forks the node's workers, their stdout and stderr piped to the launcher. False, said on
// stderr, when a pipe or a fork fails (a failed fork kills the workers already started).
bool start_workers(const Job& job, std::vector<Worker>& workers) {
  const Options& o = job.options;
  std::fflush(nullptr);
  const pid_t launcher_pid = ::getpid();
  // The launcher's signals wait while it forks (a child inherits its handlers until it resets
  // them); the mask is restored in the launcher below and in each child before exec.
  sigset_t blocked, mask;
  sigemptyset(&blocked);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&blocked, sig);
  ::sigprocmask(SIG_BLOCK, &blocked, &mask);
  struct Restore {
    const sigset_t& mask;
    ~Restore() { ::sigprocmask(SIG_SETMASK, &mask, nullptr); }
  } restore{mask};
  for (int local = 0; local < o.nproc_per_node; ++local) {
    Worker& w = workers[local];
    w.local_rank = local;
    w.rank = o.nproc_per_node * o.node_rank + local;
    int out_pipe[2];
    int err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      std::perror("dpe-launch: pipe");
      return false;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("dpe-launch: fork");
      for (auto& other : workers)
        if (other.pid > 0) ::kill(other.pid, SIGKILL);
      return false;
    }
    if (pid == 0) exec_worker(job, w, out_pipe[1], err_pipe[1], launcher_pid, mask);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    w.pid = pid;
    w.streams[0] = Stream{out_pipe[0], "", stdout};
    w.streams[1] = Stream{err_pipe[0], "", stderr};
  }
  return true;
}

// The job as the supervising loop sees it, beyond each worker's own state.
struct JobState {
  int failed = -1;      // index of the first worker that failed
  int stop_signal = 0;  // the signal that stopped the launcher
  Clock::time_point kill_deadline = Clock::time_point::max();
  std::chrono::milliseconds grace{0};
};

// Whether `pid` is stopped (SIGSTOP, SIGTSTP, a debugger): state T or t in /proc/PID/stat.
bool is_stopped(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char line[512];
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  const char* paren = read ? std::strrchr(line, ')') : nullptr;
  return paren != nullptr && paren[1] == ' ' && (paren[2] == 'T' || paren[2] == 't');
}

// Sends `sig` to every worker still running. A stopped process acts on SIGTERM only once
// continued, so SIGTERM is followed by SIGCONT (and a stopped worker is named: it is likely the
// one the others were waiting for); SIGKILL acts at once.
void stop_all(std::vector<Worker>& workers, int sig) {
  for (auto& w : workers) {
    if (w.exited) continue;
    if (sig == SIGTERM && is_stopped(w.pid)) {
      std::fprintf(stderr,
                   "dpe-launch: worker rank %d (pid %d) is stopped (SIGSTOP or a debugger); "
                   "sending SIGCONT so that SIGTERM ends it\n",
                   w.rank, static_cast<int>(w.pid));
    }
    ::kill(w.pid, sig);
    if (sig == SIGTERM) ::kill(w.pid, SIGCONT);
  }
}

// Reads the signals the launcher received: the first SIGINT or SIGTERM stops the workers.
void handle_signals(std::vector<Worker>& workers, JobState& job) {
  unsigned char sig = 0;
  while (::read(g_signal_pipe[0], &sig, 1) == 1) {
    if ((sig == SIGINT || sig == SIGTERM) && job.stop_signal == 0) {
      job.stop_signal = sig;
      std::fprintf(stderr, "dpe-launch: received %s; stopping the workers\n", strsignal(sig));
      stop_all(workers, SIGTERM);
      job.kill_deadline = Clock::now() + job.grace;
    }
  }
}

// Waits up to 100 ms (200 once every worker has exited) for the workers' output and the
// launcher's signals, and handles what came. False, said on stderr, when poll fails.
bool handle_events(std::vector<Worker>& workers, bool running, JobState& job) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, Stream*>> owners;
  fds.push_back(pollfd{g_signal_pipe[0], POLLIN, 0});
  owners.emplace_back(nullptr, nullptr);
  for (auto& w : workers) {
    for (auto& s : w.streams) {
      if (s.fd < 0) continue;
      fds.push_back(pollfd{s.fd, POLLIN, 0});
      owners.emplace_back(&w, &s);
    }
  }
  // Once every worker has exited, a grandchild may still hold a pipe open: don't wait on it.
  const int timeout_ms = running ? 100 : 200;
  const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
  if (rc < 0 && errno != EINTR) {
    std::perror("dpe-launch: poll");
    return false;
  }
  if (rc == 0 && !running) {
    for (auto& w : workers)
      for (auto& s : w.streams) close_stream(w, s);
    return true;
  }
  for (size_t i = 0; rc > 0 && i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    if (owners[i].first == nullptr) {
      handle_signals(workers, job);
      continue;
    }
    char buf[65536];
    const ssize_t k = ::read(fds[i].fd, buf, sizeof(buf));
    if (k > 0) {
      forward(*owners[i].first, *owners[i].second, buf, static_cast<size_t>(k));
    } else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
      close_stream(*owners[i].first, *owners[i].second);
    }
  }
  return true;
}

// Reaps the workers that have exited; the first failure stops the others.
void reap_workers(std::vector<Worker>& workers, JobState& job) {
  for (size_t i = 0; i < workers.size(); ++i) {
    Worker& w = workers[i];
    if (w.exited) continue;
    int status = 0;
    const pid_t pid = ::waitpid(w.pid, &status, WNOHANG);
    if (pid == 0 || (pid < 0 && errno == EINTR)) continue;
    w.exited = true;
    w.status = status;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && job.failed < 0 && job.stop_signal == 0) {
      job.failed = static_cast<int>(i);
      std::fprintf(stderr, "dpe-launch: worker rank %d (pid %d) %s; stopping the others\n", w.rank,
                   static_cast<int>(w.pid), describe(status).c_str());
      stop_all(workers, SIGTERM);
      job.kill_deadline = Clock::now() + job.grace;
    }
  }
}

// Once the grace after SIGTERM is over, SIGKILL for the workers still running.
void kill_after_grace(std::vector<Worker>& workers, JobState& job) {
  if (Clock::now() < job.kill_deadline) return;
  for (auto& w : workers) {
    if (w.exited) continue;
    std::fprintf(stderr,
                 "dpe-launch: worker rank %d (pid %d) did not stop after SIGTERM; "
                 "sending SIGKILL\n",
                 w.rank, static_cast<int>(w.pid));
    ::kill(w.pid, SIGKILL);
  }
  job.kill_deadline = Clock::time_point::max();
}

// The launcher's exit status (file comment, "Exit status") once every worker has exited.
int exit_status(const std::vector<Worker>& workers, const JobState& job) {
  if (job.stop_signal != 0) return 128 + job.stop_signal;
  if (job.failed >= 0) {
    const Worker& w = workers[job.failed];
    std::fprintf(stderr, "dpe-launch: worker rank %d (pid %d) %s\n", w.rank,
                 static_cast<int>(w.pid), describe(w.status).c_str());
    const int code = exit_code_of(w.status);
    return code == 0 ? kExitFailure : code;
  }
  return 0;
}

// Forwards the workers' output and reaps them until every one has exited and closed its
// streams; returns the launcher's exit status. `*interrupted`: a signal stopped the launcher.
int supervise(std::vector<Worker>& workers, double grace_s, bool* interrupted) {
  JobState job;
  job.grace = std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  while (true) {
    bool open_streams = false;
    bool running = false;
    for (auto& w : workers) {
      running = running || !w.exited;
      for (auto& s : w.streams) open_streams = open_streams || s.fd >= 0;
    }
    if (!running && !open_streams) break;
    if (!handle_events(workers, running, job)) {
      stop_all(workers, SIGKILL);
      return kExitFailure;
    }
    reap_workers(workers, job);
    kill_after_grace(workers, job);
  }
  *interrupted = job.stop_signal != 0;
  return exit_status(workers, job);
}

}  // namespace

int main(int argc, char** argv) {
  Job job;
  if (const int code = parse_options(argc, argv, job.options); code != kRun) return code;
  const Options& o = job.options;
  if (!make_store_token(o.nnodes, &job.store_token)) return kExitFailure;
  job.world_size = o.nproc_per_node * o.nnodes;
  enter_user_directory();
  // A program that cannot be run is said once, as a shell says it, before any worker starts.
  if (std::string why; !runnable(o.command[0], &why)) {
    std::fprintf(stderr, "dpe-launch: cannot run '%s': %s\n", o.command[0].c_str(), why.c_str());
    return 127;
  }
  // The node's cores are shared by its workers: each device computes with its share.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  job.threads_per_worker =
      std::to_string(std::max(1u, cores / static_cast<unsigned>(o.nproc_per_node)));
  if (!install_signal_handlers()) return kExitFailure;
  // torchrun's restarts: every worker of the round has exited before the next round starts, so
  // the store rank 0 served is gone and its port free; the new rank 0 serves a fresh store there.
  for (job.restart_count = 0;; ++job.restart_count) {
    std::vector<Worker> workers(static_cast<size_t>(o.nproc_per_node));
    if (!start_workers(job, workers)) return kExitFailure;
    bool interrupted = false;
    const int code = supervise(workers, o.grace_s, &interrupted);
    if (code == kExitOk || interrupted || job.restart_count == o.max_restarts) return code;
    std::fprintf(stderr,
                 "dpe-launch: restart %d of %d: starting the %d worker(s) again "
                 "(TORCHELASTIC_RESTART_COUNT=%d)\n",
                 job.restart_count + 1, o.max_restarts, o.nproc_per_node, job.restart_count + 1);
  }
}
