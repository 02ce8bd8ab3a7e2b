#include "tools/bench/server_proc.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tools/bench/load_gen.h"

namespace strata::bench {

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (s >= 0) ::close(s);
    throw std::runtime_error("cannot find a free port");
  }
  ::close(s);
  return ntohs(a.sin_port);
}

ServerProcess::ServerProcess(const std::string& binary, const std::string& config, int port,
                             const std::vector<std::string>& extra, const std::string& log_path)
    : port_(port), log_(log_path) {
  std::vector<std::string> args{binary, "serve",  "--config",
                                config, "--port", std::to_string(port)};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
}

ServerProcess::~ServerProcess() {
  stop();
}

void ServerProcess::wait_ready(double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < timeout_s) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      std::ifstream f(log_);
      std::stringstream ss;
      ss << f.rdbuf();
      auto text = ss.str();
      if (text.size() > 2000) text = text.substr(text.size() - 2000);
      throw std::runtime_error("server exited before it was ready; log " + log_ + ":\n" + text);
    }
    if (http_get("127.0.0.1", port_, "/health", 2).first == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  throw std::runtime_error("server not ready after " + std::to_string(timeout_s) + " s (log " +
                           log_ + ")");
}

void ServerProcess::stop(double grace_s) {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > grace_s) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  pid_ = -1;
}

}  // namespace strata::bench
