// Running another program for `tern bench compare`: to completion with its output captured, or
// in the background (a server) with its output in a log file, stopped later.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace tern::cli {

using EnvironmentChanges = std::vector<std::pair<std::string, std::string>>;

struct Captured {
  int exit_status = 0;  // 128 + N when signal N ended it
  std::string out;      // standard output
  std::string err;      // standard error (its last 64 KiB)
};

// Runs argv (argv[0] a path or a name on $PATH) with `env` added, waits at most `timeout_s`
// (then SIGKILL and an error).
Result<Captured> run_captured(const std::vector<std::string>& argv, const EnvironmentChanges& env,
                              double timeout_s);

class BackgroundProcess {
 public:
  BackgroundProcess() = default;
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
  BackgroundProcess(BackgroundProcess&& other) noexcept;
  BackgroundProcess& operator=(BackgroundProcess&& other) noexcept;
  ~BackgroundProcess();  // stops it

  // Starts argv with stdout and stderr appended to `log_path`.
  static Result<BackgroundProcess> start(const std::vector<std::string>& argv,
                                         const EnvironmentChanges& env,
                                         const std::string& log_path);
  bool running() const;
  // SIGTERM, SIGKILL after `grace_s`; waits for it.
  void stop(double grace_s = 10);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
};

// The last `max_bytes` of a file, for error messages.
std::string tail_of_file(const std::string& path, size_t max_bytes = 2000);

}  // namespace tern::cli
