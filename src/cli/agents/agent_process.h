// Runs a coding agent in the foreground with the user's terminal and waits for it: the terminal's
// Ctrl-C reaches the agent (it is in the same process group) while Tern ignores it, SIGTERM and
// SIGHUP sent to Tern are passed on, and the agent's exit status comes back.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace tern::cli {

// The first executable named `name` on $PATH (or `name` itself when it holds a '/').
std::optional<std::string> find_executable(const std::string& name);

// Forks, applies `env` (nullopt: unset) in the child and execs `argv` (argv[0] a path). Returns
// the agent's exit status, 128 + N when signal N ended it.
Result<int> run_agent(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::optional<std::string>>>& env);

}  // namespace tern::cli
