#include "cli/agents/agent_process.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace tern::cli {
namespace {

volatile sig_atomic_t g_child = 0;

void forward(int sig) {
  if (g_child > 0) kill(static_cast<pid_t>(g_child), sig);
}

bool is_executable(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::optional<std::string> find_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (is_executable(name)) return name;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    // An empty entry means the current directory.
    const std::filesystem::path dir =
        end > start ? std::filesystem::path(dirs.substr(start, end - start)) : ".";
    const std::string candidate = (dir / name).string();
    if (is_executable(candidate)) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

Result<int> run_agent(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::optional<std::string>>>& env) {
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  // While the agent runs, Ctrl-C and Ctrl-\ are the agent's: the terminal sends them to the whole
  // foreground group, which includes the agent. SIGTERM/SIGHUP sent to Tern alone are passed on.
  struct sigaction ignore {
  }, pass{}, old_int{}, old_quit{}, old_term{}, old_hup{};
  ignore.sa_handler = SIG_IGN;
  pass.sa_handler = forward;
  sigemptyset(&pass.sa_mask);
  sigaction(SIGINT, &ignore, &old_int);
  sigaction(SIGQUIT, &ignore, &old_quit);
  sigaction(SIGTERM, &pass, &old_term);
  sigaction(SIGHUP, &pass, &old_hup);
  auto restore = [&] {
    g_child = 0;
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
  };

  const pid_t pid = fork();
  if (pid < 0) {
    restore();
    return make_error("cannot start {}: {}", argv[0], std::strerror(errno));
  }
  if (pid == 0) {
    // The agent gets default signal handling back (ignored signals survive exec otherwise).
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (const auto& [name, value] : env) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
    execv(cargv[0], cargv.data());
    // Only async-signal-safe calls between fork and exec: write the pieces as they are.
    const char* parts[] = {"error: cannot run ", cargv[0], ": ", std::strerror(errno), "\n"};
    for (const char* part : parts) {
      [[maybe_unused]] auto n = write(2, part, std::strlen(part));
    }
    _exit(127);
  }
  g_child = pid;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      restore();
      return make_error("waiting for {} failed: {}", argv[0], std::strerror(errno));
    }
  }
  restore();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace tern::cli
