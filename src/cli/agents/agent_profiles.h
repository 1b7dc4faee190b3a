// The coding agents Tern can start, one entry each: the executable, how to install it, and what
// it reads to use a local OpenAI- or Anthropic-compatible endpoint (environment variables,
// command-line flags, a config file). Building a launch only computes it; nothing runs here.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tern::cli {

// What the agent is pointed at: a running (or about to run) `tern serve`.
struct Endpoint {
  std::string base_url;    // http://127.0.0.1:PORT (no /v1)
  std::string model;       // the served model name
  int64_t context = 0;     // tokens per sequence
  int64_t max_output = 0;  // the output limit the agent should ask for
  std::string api_key;     // any value works unless the server was started with --api-key
};

struct ConfigFile {
  std::string path;
  std::string content;
  std::string format;  // "json", "toml", "yaml": for --print-env readers
};

struct AgentLaunch {
  // Values to set; nullopt removes the variable (a hosted key the agent would otherwise send).
  std::vector<std::pair<std::string, std::optional<std::string>>> env;
  std::vector<ConfigFile> files;  // written (temp + rename) before the agent starts
  std::vector<std::string> argv;  // argv[0] is the executable
};

struct AgentProfile {
  std::string command;  // `tern <command>`
  std::string title;    // "Claude Code"
  std::string binary;   // the executable looked up on PATH
  std::string api;      // the route it talks to, for --help
  std::string install;  // how to install it, for the "not found" message
  // `config_dir` is a directory Tern owns for this agent's generated files; `args` are the
  // user's arguments after `--`.
  AgentLaunch (*build)(const AgentProfile& self, const Endpoint& endpoint,
                       const std::string& config_dir, const std::vector<std::string>& args);
};

const std::vector<AgentProfile>& agent_profiles();

}  // namespace tern::cli
