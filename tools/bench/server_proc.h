// Starts and stops `strata serve` child processes for configuration comparisons.
#pragma once

#include <string>
#include <vector>

namespace strata::bench {

class ServerProcess {
 public:
  // Runs `binary serve --config config --port port extra...`, output to `log_path`.
  ServerProcess(const std::string& binary, const std::string& config, int port,
                const std::vector<std::string>& extra, const std::string& log_path);
  ~ServerProcess();  // stops it
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  // Polls GET /health until 200; throws std::runtime_error (with the log's tail) on exit/timeout.
  void wait_ready(double timeout_s);
  void stop(double grace_s = 20);
  int port() const { return port_; }

 private:
  int pid_ = -1;
  int port_;
  std::string log_;
};

int free_port();

}  // namespace strata::bench
