// `accord node` processes for the tests of remote clusters
// (remote_cluster_test.cpp, node_security_test.cpp, node_slots_test.cpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/node_address.hpp"
#include "tests/support.hpp"

namespace accord::test {

// What a test cluster's node is started with: the stories model's folder
// (--model-dir) and --allow-faults.
std::vector<std::string> test_node_options();

// One `accord node` process, killed (SIGKILL) and reaped when the object
// goes away, whatever the test did.
class NodeProcess {
 public:
  // Starts a node on 127.0.0.1:port (0: any free port) with `options` and
  // waits until it prints the port it listens on (port() is 0 if it never
  // does: it refused its options, say). A `file_limit` above 0 caps the
  // descriptors it may open (RLIMIT_NOFILE).
  explicit NodeProcess(const TempDir& logs, std::vector<std::string> options = test_node_options(),
                       std::uint16_t port = 0, int file_limit = 0);
  ~NodeProcess() { kill_hard(); }
  NodeProcess(const NodeProcess&) = delete;
  NodeProcess& operator=(const NodeProcess&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  NodeAddress address() const { return {"127.0.0.1", port_}; }
  std::string log() const;
  // Whether the process still runs.
  bool alive();

  void freeze();  // SIGSTOP
  void resume();  // SIGCONT
  void kill_hard();
  // Sends SIGTERM and returns the exit code, or -1 when the node did not
  // exit within `timeout` (it is then killed).
  int terminate(std::chrono::milliseconds timeout);
  // Waits up to `timeout` for the process to exit by itself; its exit code,
  // or -1.
  int wait_exit(std::chrono::milliseconds timeout);

 private:
  std::uint16_t wait_for_port();

  static inline int counter_ = 0;
  std::string log_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace accord::test
