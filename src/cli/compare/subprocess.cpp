#include "cli/compare/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

namespace tern::cli {
namespace {

int status_of(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

// In the child: apply env, exec argv; never returns.
[[noreturn]] void exec_child(const std::vector<std::string>& argv, const EnvironmentChanges& env) {
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  const std::string msg = "cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
  (void)!::write(2, msg.data(), msg.size());
  ::_exit(127);
}

}  // namespace

Result<Captured> run_captured(const std::vector<std::string>& argv, const EnvironmentChanges& env,
                              double timeout_s) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return make_error("pipe: {}", std::strerror(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return make_error("pipe: {}", std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) return make_error("fork: {}", std::strerror(errno));
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    exec_child(argv, env);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  Captured c;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool timed_out = false;
  char buf[65536];
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 1000))) < 0 && errno != EINTR)
      break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      std::string& dst = i == 0 ? c.out : c.err;
      dst.append(buf, static_cast<size_t>(n));
      if (i == 1 && dst.size() > 65536) dst.erase(0, dst.size() - 65536);
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  if (timed_out) ::kill(pid, SIGKILL);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return make_error("{} did not finish within {:.0f} s", argv[0], timeout_s);
  c.exit_status = status_of(wstatus);
  return c;
}

BackgroundProcess::BackgroundProcess(BackgroundProcess&& other) noexcept : pid_(other.pid_) {
  other.pid_ = 0;
}

BackgroundProcess& BackgroundProcess::operator=(BackgroundProcess&& other) noexcept {
  if (this != &other) {
    stop();
    pid_ = other.pid_;
    other.pid_ = 0;
  }
  return *this;
}

BackgroundProcess::~BackgroundProcess() {
  stop();
}

Result<BackgroundProcess> BackgroundProcess::start(const std::vector<std::string>& argv,
                                                   const EnvironmentChanges& env,
                                                   const std::string& log_path) {
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return make_error("cannot write {}: {}", log_path, std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return make_error("fork: {}", std::strerror(errno));
  }
  if (pid == 0) {
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::setpgid(0, 0);  // the terminal's Ctrl-C reaches Tern, which stops it
    exec_child(argv, env);
  }
  ::close(log_fd);
  BackgroundProcess p;
  p.pid_ = pid;
  return p;
}

bool BackgroundProcess::running() const {
  if (pid_ <= 0) return false;
  int wstatus = 0;
  return ::waitpid(pid_, &wstatus, WNOHANG) == 0;
}

void BackgroundProcess::stop(double grace_s) {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  int wstatus = 0;
  while (::waitpid(pid_, &wstatus, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &wstatus, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = 0;
}

std::string tail_of_file(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const auto size = static_cast<size_t>(in.tellg());
  const size_t start = size > max_bytes ? size - max_bytes : 0;
  in.seekg(static_cast<std::streamoff>(start));
  std::string s(size - start, '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

}  // namespace tern::cli
