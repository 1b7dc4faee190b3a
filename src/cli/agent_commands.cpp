// `tern claude|codex|opencode|aider|goose|hermes|pi [--model M] [-- AGENT_ARGS...]`: point a coding
// agent at a local `tern serve` (reused when one already serves the model, else started in the
// background and stopped afterwards), then run the agent in the foreground. The agents' settings
// live in agents/agent_profiles.cpp; the server's lifecycle in agents/local_server.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "cli/agents/agent_process.h"
#include "cli/agents/agent_profiles.h"
#include "cli/agents/local_server.h"
#include "cli/command.h"
#include "cli/model_options.h"
#include "config/model_info.h"
#include "io/gguf_file.h"
#include "io/model_store.h"

namespace tern::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct AgentArgs {
  std::string model = kDefaultModel;
  int port = 0;
  int64_t context = 0;
  int64_t threads = 0;
  int64_t parallel = 2;
  int64_t max_output = 0;
  float temperature = -1;
  std::string api_key;
  std::string agent_path;
  double ready_timeout = 120;
  bool print_env = false;
  bool json = false;
  std::vector<std::string> agent_args;
};

// The name the server reports: the store name, or a file's or directory's stem.
std::string served_name_for(const std::string& model) {
  if (model.find('/') == std::string::npos && !model.ends_with(".gguf")) return model;
  std::string stem = fs::path(model).stem().string();
  if (stem.empty()) stem = fs::path(model).parent_path().filename().string();
  return stem.empty() ? "model" : stem;
}

// The model's own context limit, read from its GGUF header (0 when it cannot be read).
int64_t model_context_limit(const std::string& file) {
  auto gguf = GgufFile::open(file);
  if (!gguf) return 0;
  auto info = model_info_from_gguf(*gguf);
  if (!info || !info->context_length) return 0;
  return static_cast<int64_t>(*info->context_length);
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
        return std::isalnum(c) ||
               std::string_view("-_./:=,@+%").find(static_cast<char>(c)) != std::string_view::npos;
      }))
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> serve_flags(const AgentArgs& a) {
  std::vector<std::string> flags = {"--parallel", std::to_string(a.parallel)};
  if (a.context > 0) flags.insert(flags.end(), {"--ctx", std::to_string(a.context)});
  if (a.threads > 0) flags.insert(flags.end(), {"--threads", std::to_string(a.threads)});
  if (a.max_output > 0) flags.insert(flags.end(), {"--max-output", std::to_string(a.max_output)});
  if (!a.api_key.empty()) flags.insert(flags.end(), {"--api-key", a.api_key});
  if (a.temperature >= 0) flags.insert(flags.end(), {"--temp", fmt::format("{}", a.temperature)});
  return flags;
}

Endpoint endpoint_for(const AgentArgs& a, const ServerRecord& server) {
  Endpoint e;
  e.base_url = server.base_url();
  e.model = server.served_name;
  e.context = server.context;
  // What the agent may ask for: the server's cap, else a quarter of the window (room for the
  // conversation), at most 32K.
  const int64_t cap = a.max_output > 0 ? a.max_output : server.max_output;
  e.max_output = cap > 0 ? cap : std::clamp<int64_t>(server.context / 4, 256, 32768);
  if (e.context > 0) e.max_output = std::min(e.max_output, e.context);
  e.api_key = a.api_key.empty() ? "tern-local" : a.api_key;
  return e;
}

void print_launch(const AgentProfile& p, const AgentLaunch& l, const std::string& server_note,
                  const ServerRecord& server, bool as_json) {
  if (as_json) {
    json env = json::object(), unset = json::array(), files = json::array();
    for (const auto& [name, value] : l.env) {
      if (value) {
        env[name] = *value;
      } else {
        unset.push_back(name);
      }
    }
    for (const auto& f : l.files)
      files.push_back({{"path", f.path}, {"format", f.format}, {"content", f.content}});
    json out = {{"agent", p.command},
                {"server",
                 {{"url", server.base_url()},
                  {"model", server.served_name},
                  {"context", server.context},
                  {"status", server_note}}},
                {"env", env},
                {"unset", unset},
                {"files", files},
                {"argv", l.argv}};
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("# tern {}: {} over {}\n# server: {}\n", p.command, p.title, p.api, server_note);
  for (const auto& [name, value] : l.env) {
    if (value) {
      fmt::print("export {}={}\n", name, shell_quote(*value));
    } else {
      fmt::print("unset {}\n", name);
    }
  }
  for (const auto& f : l.files) {
    fmt::print("# file {} ({}):\n", f.path, f.format);
    std::string text = f.content;
    if (!text.empty() && text.back() == '\n') text.pop_back();
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      fmt::print("#   {}\n", text.substr(start, end - start));
      start = end + 1;
    }
  }
  std::string command;
  for (const auto& arg : l.argv) command += (command.empty() ? "" : " ") + shell_quote(arg);
  fmt::print("{}\n", command);
}

Result<void> write_files(const AgentLaunch& l) {
  for (const auto& f : l.files) {
    std::error_code ec;
    fs::create_directories(fs::path(f.path).parent_path(), ec);
    if (ec) return make_error("cannot create the folder of {}: {}", f.path, ec.message());
    TERN_TRY(write_file_atomically(
        f.path, {reinterpret_cast<const uint8_t*>(f.content.data()), f.content.size()}));
  }
  return {};
}

int launch(const AgentProfile& p, const AgentArgs& a, const CommandContext& ctx) {
  const std::string& home = ctx.global.home;
  // An unknown model is an error before anything starts.
  std::string model_file;
  if (!fs::is_directory(a.model)) {
    auto resolved = ModelStore(home).resolve_model_file(a.model);
    if (!resolved) return report_error(resolved.error().message);
    model_file = *resolved;
  }
  const std::string served_name = served_name_for(a.model);
  const std::string config_dir =
      (fs::path(home) / "agents" / (p.command + "-" + record_key(served_name))).string();

  std::optional<ServerRecord> running = find_running_server(home, served_name);
  if (a.print_env) {
    ServerRecord server;
    std::string note;
    if (running) {
      server = *running;
      note = fmt::format("reuses tern serve (pid {}) at {}", server.pid, server.base_url());
    } else {
      server.served_name = served_name;
      auto port = a.port > 0 ? Result<int>(a.port) : pick_free_port();
      if (!port) return report_error(port.error().message);
      server.port = *port;
      server.context = a.context > 0 ? a.context : model_context_limit(model_file);
      server.max_output = a.max_output;
      std::string flags;
      for (const auto& f : serve_flags(a)) flags += " " + shell_quote(f);
      note = fmt::format(
          "would start tern serve --model {} --served-name {} --port {}{} (context: {})",
          shell_quote(a.model), shell_quote(served_name), server.port, flags,
          a.context > 0 ? "--ctx" : "the model's limit; a started server reports its own");
    }
    const AgentLaunch l = p.build(p, endpoint_for(a, server), config_dir, a.agent_args);
    print_launch(p, l, note, server, a.json);
    return 0;
  }

  // A missing agent is reported before a model is loaded for it.
  const std::string wanted = a.agent_path.empty() ? p.binary : a.agent_path;
  auto executable = find_executable(wanted);
  if (!executable) {
    return report_error(fmt::format("{} ('{}') was not found{}; install it: {}", p.title, wanted,
                                    a.agent_path.empty() ? " on PATH" : "", p.install));
  }

  LocalServer server;
  if (running) {
    server.record = *running;
    fmt::print(stderr, "tern: using tern serve (pid {}) at {} for {}\n", running->pid,
               running->base_url(), served_name);
  } else {
    ServeRequest request;
    request.home = home;
    request.model = a.model;
    request.served_name = served_name;
    request.port = a.port;
    request.extra_args = serve_flags(a);
    request.ready_timeout_s = a.ready_timeout;
    fmt::print(stderr, "tern: starting tern serve for {}...\n", served_name);
    auto started = start_server(request);
    if (!started) return report_error(started.error().message);
    server = std::move(*started);
    fmt::print(stderr, "tern: serving {} at {} ({} tokens of context); log: {}\n", served_name,
               server.record.base_url(), server.record.context, server.record.log);
  }
  AgentLaunch l = p.build(p, endpoint_for(a, server.record), config_dir, a.agent_args);
  l.argv[0] = *executable;
  int status = 1;
  if (auto written = write_files(l); !written) {
    status = report_error(written.error().message);
  } else if (auto ran = run_agent(l.argv, l.env); !ran) {
    status = report_error(ran.error().message);
  } else {
    status = *ran;
  }
  if (server.started_here) {
    fmt::print(stderr, "tern: stopping tern serve (pid {})\n", server.pid);
    stop_server(server, home);
  }
  return status;
}

void add_agent_command(CLI::App& app, CommandContext& ctx, const AgentProfile& p) {
  auto* cmd = app.add_subcommand(
      p.command, fmt::format("Run {} on a local model (tern serve, {})", p.title, p.api));
  cmd->footer(fmt::format(
      "Arguments after -- go to {0}: tern {1} -- ARGS. A tern serve already serving the model is "
      "reused; otherwise one is started on 127.0.0.1 (log in $TERN_HOME/logs/) and stopped when "
      "{0} exits. Exit status: {0}'s.",
      p.binary, p.command));
  auto a = std::make_shared<AgentArgs>();
  cmd->add_option("-m,--model", a->model, "Model: a store name, a .gguf path or an HF directory")
      ->capture_default_str();
  cmd->add_option("--port", a->port, "Port for a server Tern starts (0: a free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("-c,--ctx", a->context,
                  "Context length of a server Tern starts (0: the model's, as tern serve picks)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("-t,--threads", a->threads, "CPU threads of a server Tern starts (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  cmd->add_option("--parallel", a->parallel, "Requests a server Tern starts decodes together")
      ->check(CLI::Range(int64_t{1}, int64_t{256}))
      ->capture_default_str();
  cmd->add_option("--max-output", a->max_output,
                  "Cap on tokens generated per request (the server's --max-output), told to the "
                  "agent as its output limit (0: a quarter of the context, at most 32K)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("--temp", a->temperature,
                  "Temperature of a server Tern starts, for requests that set none (tern serve "
                  "--temp)")
      ->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--api-key", a->api_key,
                  "Key a server Tern starts requires, and the agent sends (default: any)");
  cmd->add_option("--agent-path", a->agent_path,
                  fmt::format("Run this executable instead of '{}' from PATH", p.binary));
  cmd->add_option("--ready-timeout", a->ready_timeout,
                  "Seconds to wait for a started server to load the model and answer /health")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  cmd->add_flag("--print-env", a->print_env,
                "Print the environment, config files and command line, and start nothing");
  cmd->add_flag("--json", a->json, "With --print-env: as JSON");
  cmd->add_option("agent_args", a->agent_args,
                  fmt::format("Arguments for {} (after --)", p.binary));
  const AgentProfile* profile = &p;
  cmd->callback([&ctx, a, profile] { ctx.exit_code = launch(*profile, *a, ctx); });
}

}  // namespace

void add_agent_commands(CLI::App& app, CommandContext& ctx) {
  for (const auto& p : agent_profiles()) add_agent_command(app, ctx, p);
}

}  // namespace tern::cli
