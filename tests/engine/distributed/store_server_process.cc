// StoreServerProcess: fork, serve, report the port through a pipe, wait to be killed.
#include "tests/engine/distributed/store_server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "engine/core/error.h"
#include "engine/distributed/tcp_store.h"

namespace dpe::test {

StoreServerProcess::StoreServerProcess() {
  int fds[2];
  DPE_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "StoreServerProcess: pipe: " << std::strerror(errno));
  pid_ = ::fork();
  DPE_CHECK(pid_ >= 0, "StoreServerProcess: fork: " << std::strerror(errno));
  if (pid_ == 0) {
    ::close(fds[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test that crashed
    int port = -1;
    try {
      distributed::TCPStore server("127.0.0.1", 0, true);
      port = server.port();
      if (::write(fds[1], &port, sizeof(port)) != sizeof(port)) ::_exit(1);
      while (true) ::pause();  // serves on its threads until the parent kills it
    } catch (const std::exception&) {
      if (::write(fds[1], &port, sizeof(port)) != sizeof(port)) ::_exit(1);
      ::_exit(1);
    }
  }
  ::close(fds[1]);
  int port = -1;
  ssize_t k;
  do {
    k = ::read(fds[0], &port, sizeof(port));
  } while (k < 0 && errno == EINTR);
  ::close(fds[0]);
  if (k != sizeof(port) || port <= 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    DPE_THROW("StoreServerProcess: the server did not start");
  }
  port_ = port;
}

StoreServerProcess::~StoreServerProcess() {
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

}  // namespace dpe::test
