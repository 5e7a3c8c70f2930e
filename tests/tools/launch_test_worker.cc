// A worker for launch_test: what it does is chosen by its first argument.
//   env                 print the variables the launcher sets, one line each
//   args ...            print the arguments it received
//   fail RANK CODE      rank RANK exits with CODE; the others print their pid and wait
//   wait                print "ready pid=<pid>" and wait to be stopped
//   reduce              init_process_group() from the launcher's environment, reduce_value;
//                       a failure prints "error: <message>" and exits with 1
//   restarts RANK CODE ROUNDS
//                       print "round N" (TORCHELASTIC_RESTART_COUNT); in the first ROUNDS rounds
//                       rank RANK exits with CODE and the others wait to be stopped; later every
//                       rank exits with 0
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "engine/distributed/distributed.h"
#include "engine/tensor/tensor.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const char* rank_text = std::getenv("RANK");
  const int rank = rank_text ? std::atoi(rank_text) : -1;
  if (mode == "env") {
    for (const char* name :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "OMP_NUM_THREADS", "DPE_HOST_DEVICES", "DPE_STORE_TOKEN", "DPE_RDZV_TIMEOUT",
          "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS"}) {
      const char* v = std::getenv(name);
      std::printf("%s=%s\n", name, v ? v : "<unset>");
    }
    std::fprintf(stderr, "to stderr\n");
    std::printf("no newline at the end");
    return 0;
  }
  if (mode == "args") {
    for (int i = 2; i < argc; ++i) std::printf("arg%d=%s\n", i - 2, argv[i]);
    return 0;
  }
  if (mode == "fail" && argc == 4) {
    if (rank == std::atoi(argv[2])) {
      // Let the others start, so the launcher has someone to stop.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::fprintf(stderr, "failing on purpose\n");
      return std::atoi(argv[3]);
    }
    std::printf("waiting pid=%d\n", static_cast<int>(::getpid()));
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::printf("survived\n");
    return 0;
  }
  if (mode == "restarts" && argc == 5) {
    const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
    const int round = count ? std::atoi(count) : -1;
    std::printf("round %d\n", round);
    std::fflush(stdout);
    if (round >= std::atoi(argv[4])) return 0;
    if (rank == std::atoi(argv[2])) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return std::atoi(argv[3]);
    }
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::printf("survived\n");
    return 0;
  }
  if (mode == "wait") {
    std::printf("ready pid=%d\n", static_cast<int>(::getpid()));
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::printf("survived\n");
    return 0;
  }
  if (mode == "reduce") {
    namespace dist = dpe::distributed;
    try {
      dist::init_process_group("gloo", "env://", -1, -1, std::chrono::seconds(20));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
    dpe::Tensor value = dpe::Tensor::scalar(static_cast<float>(dist::get_rank() + 1));
    const float mean = dist::reduce_value(value, /*average=*/true).item();
    std::printf("rank %d of %d local %d: mean %.2f%s\n", dist::get_rank(), dist::get_world_size(),
                dist::get_local_rank(), mean, dist::is_main_process() ? " (main)" : "");
    dist::barrier();
    dist::destroy_process_group();
    return 0;
  }
  std::fprintf(stderr, "launch_test_worker: unknown mode '%s'\n", mode.c_str());
  return 2;
}
