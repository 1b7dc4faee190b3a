#include "cli/agents/local_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

namespace tern::cli {
namespace {

namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool pid_alive(int pid) {
  return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

std::string self_executable() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("tern") : p.string();
}

std::string log_tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i)
    out += "  " + all[i] + "\n";
  return out;
}

std::string timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

std::optional<std::string> http_get(const ServerRecord& server, const std::string& path,
                                    double timeout_s) {
  httplib::Client client(server.host, server.port);
  const auto usec = static_cast<time_t>(timeout_s * 1e6);
  client.set_connection_timeout(usec / 1000000, usec % 1000000);
  client.set_read_timeout(usec / 1000000, usec % 1000000);
  auto res = client.Get(path.c_str());
  if (!res || res->status != 200) return std::nullopt;
  return res->body;
}

std::optional<ServerRecord> find_running_server(const std::string& home,
                                                const std::string& served_name) {
  auto record = read_record(home, served_name);
  if (!record || !pid_alive(record->pid)) return std::nullopt;
  if (!http_get(*record, "/health")) return std::nullopt;
  return record;
}

Result<int> pick_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return make_error("cannot open a socket: {}", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  if (!ok) return make_error("cannot find a free port on 127.0.0.1: {}", std::strerror(errno));
  return static_cast<int>(ntohs(addr.sin_port));
}

Result<LocalServer> start_server(const ServeRequest& request) {
  int port = request.port;
  if (port == 0) {
    auto free_port = pick_free_port();
    if (!free_port) return free_port.error();
    port = *free_port;
  }
  const fs::path log_dir = fs::path(request.home) / "logs";
  std::error_code ec;
  fs::create_directories(log_dir, ec);
  if (ec) return make_error("cannot create {}: {}", log_dir.string(), ec.message());
  const std::string log =
      (log_dir / fmt::format("serve-{}-{}.log", record_key(request.served_name), timestamp()))
          .string();
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return make_error("cannot write {}: {}", log, std::strerror(errno));

  std::vector<std::string> args = {
      self_executable(), "--home",      request.home,    "serve",
      "--model",         request.model, "--served-name", request.served_name,
      "--host",          "127.0.0.1",   "--port",        std::to_string(port),
      "--log-requests"};
  args.insert(args.end(), request.extra_args.begin(), request.extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return make_error("cannot start tern serve: {}", std::strerror(errno));
  }
  if (pid == 0) {
    // Its own process group: the terminal's Ctrl-C is for the agent, not for the server.
    setpgid(0, 0);
    // If the launcher dies without stopping it, the server stops too.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);

  LocalServer server;
  server.started_here = true;
  server.pid = pid;
  server.record.pid = pid;
  server.record.port = port;
  server.record.model = request.model;
  server.record.served_name = request.served_name;
  server.record.log = log;
  const double deadline = now_s() + request.ready_timeout_s;
  while (true) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      const std::string how = WIFEXITED(status)
                                  ? fmt::format("exited with status {}", WEXITSTATUS(status))
                                  : fmt::format("was killed by signal {}", WTERMSIG(status));
      server.pid = 0;
      return make_error("tern serve {} before it was ready; the end of {}:\n{}", how, log,
                        log_tail(log, 15));
    }
    // Ready once it has written its record (it has bound the port) and /health answers.
    if (auto r = read_record(request.home, request.served_name); r && r->pid == pid) {
      if (http_get(*r, "/health")) {
        server.record = *r;
        server.record.log = log;
        return server;
      }
    }
    if (now_s() > deadline) {
      LocalServer doomed = server;
      stop_server(doomed, request.home, 5);
      return make_error("tern serve was not ready after {:.0f} s; the end of {}:\n{}",
                        request.ready_timeout_s, log, log_tail(log, 15));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void stop_server(LocalServer& server, const std::string& home, double grace_s) {
  if (!server.started_here || server.pid <= 0) return;
  kill(server.pid, SIGTERM);
  const double deadline = now_s() + grace_s;
  int status = 0;
  while (waitpid(server.pid, &status, WNOHANG) == 0) {
    if (now_s() > deadline) {
      kill(server.pid, SIGKILL);
      waitpid(server.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  remove_record(home, server.record.served_name, server.pid);
  server.pid = 0;
}

}  // namespace tern::cli
