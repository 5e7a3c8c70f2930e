// tools/launch (dpe-launch): the environment each worker sees, flags after the program going to
// the program, rank-prefixed output, and failure propagation: exit code, the failed worker named,
// the others stopped; SIGTERM to the launcher stops every worker, and kill -9 of the launcher
// takes them with it; bad launcher flags exit with 2; a random DPE_STORE_TOKEN for the workers
// unless one is set; --rdzv-timeout bounds the rendezvous; torchrun's --standalone,
// --rdzv-endpoint (IPv6 in brackets), --rdzv-id (a rank of another job is refused) and
// --rdzv-backend (static, or c10d on one node).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/util/free_port.h"

namespace {

std::string launcher() { return ::testing::internal::GetArgvs().at(1); }
std::string worker() { return ::testing::internal::GetArgvs().at(2); }

std::string output_path(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name + "_" + std::to_string(::getpid()) + ".txt";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts the launcher with stdout and stderr into `out_path`; returns its pid.
pid_t start(const std::vector<std::string>& args, const std::string& out_path) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    std::vector<std::string> all = {launcher()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(126);
  }
  return pid;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run(const std::vector<std::string>& args, std::string* output) {
  const std::string path = output_path("launch");
  const int code = wait_exit_code(start(args, path));
  *output = read_file(path);
  return code;
}

// Whether `pid` runs: a zombie (exited, not yet reaped by whoever inherited it) does not.
bool alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<int> pids_in(const std::string& output, const std::string& tag) {
  std::vector<int> pids;
  std::regex re(tag + " pid=([0-9]+)");
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it) {
    pids.push_back(std::stoi((*it)[1]));
  }
  return pids;
}

TEST(LaunchTest, WorkersSeeTheirRankAndTheRendezvousAddress) {
  std::string out;
  ASSERT_EQ(run({"--nproc_per_node=2", "--master_port=23456", worker(), "env"}, &out), 0) << out;
  for (int r = 0; r < 2; ++r) {
    const std::string p = "[rank" + std::to_string(r) + "]: ";
    EXPECT_TRUE(contains(out, p + "RANK=" + std::to_string(r) + "\n")) << out;
    EXPECT_TRUE(contains(out, p + "LOCAL_RANK=" + std::to_string(r) + "\n")) << out;
    EXPECT_TRUE(contains(out, p + "WORLD_SIZE=2\n")) << out;
    EXPECT_TRUE(contains(out, p + "LOCAL_WORLD_SIZE=2\n")) << out;
    EXPECT_TRUE(contains(out, p + "MASTER_ADDR=127.0.0.1\n")) << out;
    EXPECT_TRUE(contains(out, p + "MASTER_PORT=23456\n")) << out;
    EXPECT_TRUE(contains(out, p + "OMP_NUM_THREADS=1\n")) << out;
    EXPECT_TRUE(contains(out, p + "DPE_HOST_DEVICES=1\n")) << out;
    EXPECT_TRUE(contains(out, p + "to stderr\n")) << out;
    // A last line without a newline is still passed on, prefixed and terminated.
    EXPECT_TRUE(contains(out, p + "no newline at the end\n")) << out;
  }
}

TEST(LaunchTest, SecondNodeRanksAndDefaults) {
  std::string out;
  ASSERT_EQ(run({"--nnodes=2", "--node_rank=1", "--nproc_per_node", "2", "--master_addr",
                 "10.0.0.1", worker(), "env"},
                &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "[rank2]: RANK=2\n")) << out;
  EXPECT_TRUE(contains(out, "[rank3]: LOCAL_RANK=1\n")) << out;
  EXPECT_TRUE(contains(out, "[rank3]: WORLD_SIZE=4\n")) << out;
  EXPECT_TRUE(contains(out, "[rank2]: MASTER_ADDR=10.0.0.1\n")) << out;
  EXPECT_TRUE(contains(out, "[rank2]: MASTER_PORT=29500\n")) << out;
  // One process per node: OMP_NUM_THREADS is left alone.
  ASSERT_EQ(run({worker(), "env"}, &out), 0) << out;
  EXPECT_FALSE(contains(out, "OMP_NUM_THREADS=1\n") && std::getenv("OMP_NUM_THREADS") == nullptr)
      << out;
  EXPECT_TRUE(contains(out, "[rank0]: WORLD_SIZE=1\n")) << out;
}

TEST(LaunchTest, FlagsAfterTheProgramGoToTheProgram) {
  std::string out;
  ASSERT_EQ(
      run({"--nproc_per_node=1", worker(), "args", "--nproc_per_node=7", "-x", "plain"}, &out), 0)
      << out;
  EXPECT_TRUE(contains(out, "[rank0]: arg0=--nproc_per_node=7\n")) << out;
  EXPECT_TRUE(contains(out, "[rank0]: arg1=-x\n")) << out;
  EXPECT_TRUE(contains(out, "[rank0]: arg2=plain\n")) << out;
}

TEST(LaunchTest, AFailedWorkerStopsTheOthersAndSetsTheExitCode) {
  std::string out;
  EXPECT_EQ(run({"--nproc_per_node=3", "--grace=2", worker(), "fail", "1", "3"}, &out), 3) << out;
  EXPECT_TRUE(contains(out, "[rank1]: failing on purpose\n")) << out;
  EXPECT_TRUE(
      std::regex_search(out, std::regex("worker rank 1 \\(pid [0-9]+\\) exited with code 3")))
      << out;
  EXPECT_FALSE(contains(out, "survived")) << out;
  for (int pid : pids_in(out, "waiting")) {
    EXPECT_NE(::kill(pid, 0), 0) << "worker " << pid << " is still running";
  }
}

TEST(LaunchTest, AMissingProgramIsReported) {
  std::string out;
  EXPECT_EQ(run({"/nonexistent/program"}, &out), 127) << out;
  EXPECT_TRUE(contains(out, "cannot run '/nonexistent/program'")) << out;
  EXPECT_NE(run({}, &out), 0);
  EXPECT_TRUE(contains(out, "no program given")) << out;
}

// A program that is not there exits 127 saying so, as a shell does, every time and with any
// number of workers: the launcher looks the program up before it starts any. It used to start
// them all, and one whose exec failed first made the launcher SIGTERM the others, which (still
// in the launcher's handler between fork and exec) reported "received Terminated": 143.
TEST(LaunchTest, AMissingProgramExits127SayingItWasNotFound) {
  std::string out;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(run({"--nproc_per_node=4", "/nonexistent/program", "--flag"}, &out), 127) << out;
    EXPECT_TRUE(contains(out, "dpe-launch: cannot run '/nonexistent/program': No such file or "
                              "directory (not found)"))
        << out;
    EXPECT_FALSE(contains(out, "received")) << out;
    EXPECT_FALSE(contains(out, "[rank")) << "a worker started: " << out;
  }
  EXPECT_EQ(run({"--nproc_per_node=2", "no-such-program-on-path"}, &out), 127) << out;
  EXPECT_TRUE(contains(out, "cannot run 'no-such-program-on-path': not found on PATH")) << out;
}

// A worker that fails at once (/bin/false) gives the launcher its code, 1, every time: the SIGTERM
// that stops the others while they are still between fork and exec stops them, and is not taken
// for the launcher's own (it was, 7 times in 10: "received Terminated", 143).
TEST(LaunchTest, AWorkerFailingAtOnceGivesItsCodeNotTheLaunchersSignal) {
  std::string out;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(run({"--nproc_per_node=4", "/bin/false"}, &out), 1) << out;
    EXPECT_FALSE(contains(out, "received")) << out;
  }
}

// A flag the launcher does not have, before the program, is a usage error naming it (torchrun
// refuses it too), not a program to run: "dpe-launch --backend mpi train" ran "--backend".
TEST(LaunchTest, AnUnknownLauncherFlagBeforeTheProgramExits2) {
  std::string out;
  EXPECT_EQ(run({"--nproc_per_node=2", "--backend", "mpi", worker(), "env"}, &out), 2) << out;
  EXPECT_TRUE(contains(out, "--backend")) << out;
  EXPECT_TRUE(contains(out, "not a dpe-launch flag")) << out;
  EXPECT_FALSE(contains(out, "RANK=")) << "a worker ran: " << out;
}

using dpe::test::free_port;

// End to end: the workers find each other through the environment the launcher sets.
TEST(LaunchTest, WorkersFormAProcessGroup) {
  std::string out;
  ASSERT_EQ(run({"--nproc_per_node=3", "--master_port=" + std::to_string(free_port()), worker(),
                 "reduce"},
                &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "[rank0]: rank 0 of 3 local 0: mean 2.00 (main)\n")) << out;
  EXPECT_TRUE(contains(out, "[rank1]: rank 1 of 3 local 1: mean 2.00\n")) << out;
  EXPECT_TRUE(contains(out, "[rank2]: rank 2 of 3 local 2: mean 2.00\n")) << out;
}

TEST(LaunchTest, SigtermToTheLauncherStopsEveryWorker) {
  const std::string path = output_path("sigterm");
  const pid_t pid = start({"--nproc_per_node=2", worker(), "wait"}, path);
  std::vector<int> pids;
  for (int i = 0; i < 1000 && pids.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    pids = pids_in(read_file(path), "ready");
  }
  ASSERT_EQ(pids.size(), 2u) << read_file(path);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit_code(pid), 128 + SIGTERM);
  const std::string out = read_file(path);
  EXPECT_FALSE(contains(out, "survived")) << out;
  EXPECT_TRUE(contains(out, "stopping the workers")) << out;
  for (int w : pids) EXPECT_NE(::kill(w, 0), 0) << "worker " << w << " is still running";
}

// The workers die with their launcher, kill -9 included (PR_SET_PDEATHSIG).
TEST(LaunchTest, WorkersDieWithAKilledLauncher) {
  const std::string path = output_path("sigkill");
  const pid_t pid = start({"--nproc_per_node=2", worker(), "wait"}, path);
  std::vector<int> pids;
  for (int i = 0; i < 3000 && pids.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    pids = pids_in(read_file(path), "ready");
  }
  ASSERT_EQ(pids.size(), 2u) << read_file(path);
  ::kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit_code(pid), 128 + SIGKILL);
  // Within a few seconds (the signal is immediate; the bound is for a loaded machine).
  for (int i = 0; i < 1000 && (alive(pids[0]) || alive(pids[1])); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int w : pids) EXPECT_FALSE(alive(w)) << "worker " << w << " outlived its launcher";
  EXPECT_FALSE(contains(read_file(path), "survived"));
}

// Launcher flag errors are usage errors: exit code 2, as train's (docs/flags.md, "Exit codes").
TEST(LaunchTest, BadFlagsExitWithCode2) {
  std::string out;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--nproc_per_node=0", worker(), "env"},
        {"--nproc_per_node=many", worker(), "env"},
        {"--master_port=70000", worker(), "env"},
        {"--grace=-1", worker(), "env"},
        {"--rdzv-timeout=0", worker(), "env"},
        {"--rdzv-timeout=nan", worker(), "env"},
        {"--nnodes=2", "--node_rank=2", worker(), "env"},
        {}}) {
    EXPECT_EQ(run(args, &out), 2) << out;
    EXPECT_FALSE(contains(out, "RANK=")) << "a worker ran: " << out;
  }
  EXPECT_EQ(run({"--help"}, &out), 0) << out;
  EXPECT_TRUE(contains(out, "--rdzv-timeout")) << out;
}

std::string value_in(const std::string& output, const std::string& prefix) {
  const size_t at = output.find(prefix);
  if (at == std::string::npos) return "<missing>";
  const size_t end = output.find('\n', at);
  return output.substr(at + prefix.size(), end - at - prefix.size());
}

// The store refuses clients without the job's token; the launcher makes one per job when the
// user has not set DPE_STORE_TOKEN, and leaves the user's alone.
TEST(LaunchTest, WorkersGetARandomStoreTokenUnlessOneIsSet) {
  ::unsetenv("DPE_STORE_TOKEN");
  std::string out;
  ASSERT_EQ(run({"--nproc_per_node=2", worker(), "env"}, &out), 0) << out;
  const std::string token = value_in(out, "[rank0]: DPE_STORE_TOKEN=");
  EXPECT_TRUE(std::regex_match(token, std::regex("[0-9a-f]{32}"))) << token;
  EXPECT_EQ(value_in(out, "[rank1]: DPE_STORE_TOKEN="), token) << "ranks share the job's token";
  ASSERT_EQ(run({"--nproc_per_node=2", worker(), "env"}, &out), 0) << out;
  EXPECT_NE(value_in(out, "[rank0]: DPE_STORE_TOKEN="), token) << "a fresh token per job";
  ::setenv("DPE_STORE_TOKEN", "users-own-secret", 1);
  ASSERT_EQ(run({"--nproc_per_node=2", worker(), "env"}, &out), 0) << out;
  ::unsetenv("DPE_STORE_TOKEN");
  EXPECT_EQ(value_in(out, "[rank0]: DPE_STORE_TOKEN="), "users-own-secret") << out;
  EXPECT_EQ(value_in(out, "[rank1]: DPE_STORE_TOKEN="), "users-own-secret") << out;
  // Workers with the generated token form a group (the store asks for it, they present it).
  ASSERT_EQ(run({"--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), worker(),
                 "reduce"},
                &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "[rank0]: rank 0 of 2 local 0: mean 1.50 (main)\n")) << out;
}

// --rdzv-timeout: a rank that never comes (node 1 of 2 is never started) fails the job within
// seconds, naming the missing rank, instead of 30 minutes of waiting.
TEST(LaunchTest, RdzvTimeoutBoundsTheRendezvous) {
  std::string out;
  ASSERT_EQ(run({"--rdzv-timeout=0.5", worker(), "env"}, &out), 0) << out;
  EXPECT_TRUE(contains(out, "[rank0]: DPE_RDZV_TIMEOUT=0.5\n")) << out;
  EXPECT_EQ(run({"--nnodes=2", "--node_rank=0", "--rdzv-timeout=1",
                 "--master_port=" + std::to_string(free_port()), worker(), "reduce"},
                &out),
            1)
      << out;
  EXPECT_TRUE(contains(out, "rendezvous timed out")) << out;
  EXPECT_TRUE(contains(out, "rank 1 of 2 has not reached the store")) << out;
  // The flag's 1 s, not the worker's own 20 s argument nor the 30-minute default.
  EXPECT_TRUE(contains(out, "timed out after 1000 ms")) << out;
}

// torchrun --standalone: one node, the store on 127.0.0.1 at a free port (not the default 29500),
// a fresh job id shared by the node's workers; they form a group there.
TEST(LaunchTest, StandalonePicksAFreeLocalEndpointAndAJobId) {
  std::string out;
  ASSERT_EQ(run({"--standalone", "--nproc-per-node=2", worker(), "env"}, &out), 0) << out;
  EXPECT_EQ(value_in(out, "[rank0]: MASTER_ADDR="), "127.0.0.1") << out;
  const std::string port = value_in(out, "[rank0]: MASTER_PORT=");
  EXPECT_TRUE(std::regex_match(port, std::regex("[1-9][0-9]*"))) << out;
  EXPECT_NE(port, "29500") << out;
  EXPECT_EQ(value_in(out, "[rank1]: MASTER_PORT="), port) << out;
  const std::string id = value_in(out, "[rank0]: TORCHELASTIC_RUN_ID=");
  EXPECT_TRUE(std::regex_match(id, std::regex("[0-9a-f]{32}"))) << out;
  EXPECT_EQ(value_in(out, "[rank1]: TORCHELASTIC_RUN_ID="), id) << out;
  ASSERT_EQ(run({"--standalone", "--nproc-per-node=2", worker(), "env"}, &out), 0) << out;
  EXPECT_NE(value_in(out, "[rank0]: TORCHELASTIC_RUN_ID="), id) << "a fresh id per job";
  ASSERT_EQ(run({"--standalone", "--nproc_per_node=3", worker(), "reduce"}, &out), 0) << out;
  EXPECT_TRUE(contains(out, "[rank2]: rank 2 of 3 local 2: mean 2.00\n")) << out;
  // Rendezvous flags beside it are ignored, as torchrun ignores them, and said so.
  ASSERT_EQ(run({"--standalone", "--master_port=23456", worker(), "env"}, &out), 0) << out;
  EXPECT_TRUE(contains(out, "ignoring --master_port") || contains(out, "ignoring --master-port"))
      << out;
  EXPECT_NE(value_in(out, "[rank0]: MASTER_PORT="), "23456") << out;
  EXPECT_EQ(run({"--standalone", "--nnodes=2", worker(), "env"}, &out), 2) << out;
  EXPECT_TRUE(contains(out, "--standalone is one node")) << out;
}

// Whether this machine can listen on the IPv6 loopback.
bool ipv6_loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// --rdzv-endpoint HOST[:PORT] is the workers' MASTER_ADDR and MASTER_PORT: an IPv6 address in
// brackets, a host without a port keeping --master-port's default; the underscore spelling too.
TEST(LaunchTest, RdzvEndpointSetsTheMasterAddressAndPort) {
  std::string out;
  ASSERT_EQ(run({"--rdzv-endpoint=10.1.2.3:1234", worker(), "env"}, &out), 0) << out;
  EXPECT_TRUE(contains(out, "[rank0]: MASTER_ADDR=10.1.2.3\n")) << out;
  EXPECT_TRUE(contains(out, "[rank0]: MASTER_PORT=1234\n")) << out;
  ASSERT_EQ(run({"--rdzv_endpoint", "[fe80::1]:777", worker(), "env"}, &out), 0) << out;
  EXPECT_TRUE(contains(out, "[rank0]: MASTER_ADDR=fe80::1\n")) << out;
  EXPECT_TRUE(contains(out, "[rank0]: MASTER_PORT=777\n")) << out;
  ASSERT_EQ(run({"--rdzv-endpoint", "node0.example", worker(), "env"}, &out), 0) << out;
  EXPECT_TRUE(contains(out, "[rank0]: MASTER_ADDR=node0.example\n")) << out;
  EXPECT_TRUE(contains(out, "[rank0]: MASTER_PORT=29500\n")) << out;
  // End to end over IPv4, and over the IPv6 loopback where there is one.
  ASSERT_EQ(run({"--nproc_per_node=2", "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port()),
                 worker(), "reduce"},
                &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "[rank1]: rank 1 of 2 local 1: mean 1.50\n")) << out;
  if (!ipv6_loopback()) {
    std::printf("no IPv6 loopback here: the [::1] rendezvous is not run\n");
    return;
  }
  ASSERT_EQ(run({"--nproc_per_node=2", "--rdzv-endpoint=[::1]:" + std::to_string(free_port()),
                 worker(), "reduce"},
                &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "[rank0]: rank 0 of 2 local 0: mean 1.50 (main)\n")) << out;
}

// What the launcher does not do is refused with exit 2 before any worker runs: an endpoint that is
// not HOST[:PORT], an endpoint beside --master-addr/--master-port, a rendezvous backend other than
// static (c10d on one node only), an empty job id.
TEST(LaunchTest, RendezvousFlagsItCannotHonourExitWith2) {
  std::string out;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--rdzv-endpoint=host:0", worker(), "env"},
        {"--rdzv-endpoint=::1:29500", worker(), "env"},
        {"--rdzv-endpoint=[::1", worker(), "env"},
        {"--rdzv-endpoint=:29500", worker(), "env"},
        {"--rdzv-endpoint=1.2.3.4:5", "--master_port=7", worker(), "env"},
        {"--rdzv-backend=etcd", worker(), "env"},
        {"--rdzv_backend=c10d", "--nnodes=2", worker(), "env"},
        {"--rdzv-id", "", worker(), "env"}}) {
    EXPECT_EQ(run(args, &out), 2) << args[0] << ": " << out;
    EXPECT_FALSE(contains(out, "RANK=")) << "a worker ran: " << out;
  }
  EXPECT_EQ(run({"--rdzv-backend=etcd", worker(), "env"}, &out), 2);
  EXPECT_TRUE(contains(out, "--rdzv-backend etcd is not supported")) << out;
  EXPECT_TRUE(contains(out, "use --rdzv-backend static")) << out;
  for (const char* backend : {"--rdzv-backend=static", "--rdzv_backend=c10d"}) {
    EXPECT_EQ(run({backend, worker(), "env"}, &out), 0) << backend << ": " << out;
  }
  EXPECT_EQ(run({"--help"}, &out), 0) << out;
  for (const char* flag : {"--standalone", "--rdzv-endpoint", "--rdzv-id", "--rdzv-backend"}) {
    EXPECT_TRUE(contains(out, flag)) << flag << ": " << out;
  }
}

// --rdzv-id names the job: its workers get it as TORCHELASTIC_RUN_ID, and a node of another job
// that reaches this job's store fails at once, naming both ids, while one of the same job joins.
TEST(LaunchTest, RdzvIdKeepsAnotherJobsRanksOut) {
  ::unsetenv("DPE_STORE_TOKEN");  // two nodes share no generated token
  std::string out;
  ASSERT_EQ(run({"--rdzv_id=job-7", worker(), "env"}, &out), 0) << out;
  EXPECT_TRUE(contains(out, "[rank0]: TORCHELASTIC_RUN_ID=job-7\n")) << out;
  const std::string endpoint = "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port());
  const std::string node0 = output_path("node0");
  pid_t pid = start({"--nnodes=2", "--node-rank=0", "--rdzv-id=job-a", "--rdzv-timeout=5", endpoint,
                     worker(), "reduce"},
                    node0);
  EXPECT_EQ(run({"--nnodes=2", "--node-rank=1", "--rdzv-id=job-b", "--rdzv-timeout=5", endpoint,
                 worker(), "reduce"},
                &out),
            1)
      << out;
  EXPECT_TRUE(contains(out, "rank 1 belongs to job 'job-b'")) << out;
  EXPECT_TRUE(contains(out, "serves job 'job-a' (rank 0's)")) << out;
  EXPECT_EQ(wait_exit_code(pid), 1) << read_file(node0);  // its rank 1 never came
  // The same id: the two nodes form one job.
  const std::string same = "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port());
  pid = start({"--nnodes=2", "--node-rank=0", "--rdzv-id=job-c", "--rdzv-timeout=20", same,
               worker(), "reduce"},
              node0);
  EXPECT_EQ(run({"--nnodes=2", "--node-rank=1", "--rdzv-id=job-c", "--rdzv-timeout=20", same,
                 worker(), "reduce"},
                &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "[rank1]: rank 1 of 2 local 0: mean 1.50\n")) << out;
  EXPECT_EQ(wait_exit_code(pid), 0) << read_file(node0);
}

}  // namespace
