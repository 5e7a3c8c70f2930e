// StoreServerProcess: a TCPStore server on 127.0.0.1 in a child process, for tests that then
// spawn ranks. spawn forks, and a server thread in the test process would break its rule (the
// caller must be single-threaded); a child process leaves the test process single-threaded.
//
// Threading contract: construct it before the process starts any thread (it forks); construct
// and destroy it on one thread. The destructor kills and reaps the server.
#pragma once

#include <sys/types.h>

namespace dpe::test {

class StoreServerProcess {
 public:
  StoreServerProcess();  // returns once the server listens
  ~StoreServerProcess();
  StoreServerProcess(const StoreServerProcess&) = delete;
  StoreServerProcess& operator=(const StoreServerProcess&) = delete;

  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace dpe::test
