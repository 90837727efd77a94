#include "tests/node_process.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace accord::test {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kNodeStartTimeout = std::chrono::seconds(30);

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

std::vector<std::string> test_node_options() {
  return {"--model-dir", std::filesystem::path(stories_model()).parent_path().string(), "--allow-faults"};
}

NodeProcess::NodeProcess(const TempDir& logs, std::vector<std::string> options, std::uint16_t port, int file_limit)
    : log_(logs.file("node-" + std::to_string(counter_++) + ".log")) {
  std::vector<std::string> args = {ACCORD_BINARY, "node", "--listen", "127.0.0.1:" + std::to_string(port)};
  args.insert(args.end(), options.begin(), options.end());
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    // Only async-signal-safe calls between fork and exec.
    const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (file_limit > 0) {
      const rlimit limit{static_cast<rlim_t>(file_limit), static_cast<rlim_t>(file_limit)};
      ::setrlimit(RLIMIT_NOFILE, &limit);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  port_ = wait_for_port();
}

std::string NodeProcess::log() const {
  std::ifstream in(log_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool NodeProcess::alive() { return pid_ > 0 && wait_exit(std::chrono::milliseconds(0)) == -1; }

// A process already reaped has no pid: kill(-1, ...) would signal every
// process this user may.
void NodeProcess::freeze() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void NodeProcess::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

void NodeProcess::kill_hard() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int NodeProcess::terminate(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  const int code = wait_exit(timeout);
  if (code == -1) kill_hard();
  return code;
}

int NodeProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return exit_code(status);
    }
    if (Clock::now() >= deadline) return -1;
    // Fine-grained, so that the stop time the caller measures is the node's.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::uint16_t NodeProcess::wait_for_port() {
  const std::string marker = "listening on 127.0.0.1:";
  const auto deadline = Clock::now() + kNodeStartTimeout;
  while (Clock::now() < deadline) {
    const std::string text = log();
    if (const auto at = text.find(marker); at != std::string::npos && text.find('\n', at) != std::string::npos) {
      return static_cast<std::uint16_t>(std::stoi(text.substr(at + marker.size())));
    }
    if (wait_exit(std::chrono::milliseconds(0)) != -1) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "the node did not start listening:\n" << log();
  return 0;
}

}  // namespace accord::test
