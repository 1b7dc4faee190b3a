#include "cli/compare/engines.h"

#include <algorithm>
#include <filesystem>

#include "cli/agents/agent_process.h"
#include "cli/compare/engine_factories.h"

namespace tern::cli {
namespace {

bool wanted(const EngineSearch& search, const std::string& name) {
  return search.only.empty() ||
         std::find(search.only.begin(), search.only.end(), name) != search.only.end();
}

// `name` in --llama-bin's folder (or its bin/), else on $PATH.
std::optional<std::string> find_llama_tool(const EngineSearch& search, const std::string& name) {
  if (!search.llama_bin.empty()) {
    for (const auto& dir : {std::filesystem::path(search.llama_bin),
                            std::filesystem::path(search.llama_bin) / "bin"}) {
      const auto p = dir / name;
      if (std::filesystem::exists(p)) return std::filesystem::absolute(p).string();
    }
    return std::nullopt;
  }
  return find_executable(name);
}

}  // namespace

FoundEngines find_engines(const CompareSetup& setup, const EngineSearch& search) {
  FoundEngines found;
  if (wanted(search, "tern")) found.engines.push_back(make_tern_engine(search.tern, setup));
  const std::string where = search.llama_bin.empty() ? "on PATH" : "in " + search.llama_bin;
  for (const std::string tool : {"llama-bench", "llama-server"}) {
    if (!wanted(search, tool)) continue;
    if (auto path = find_llama_tool(search, tool)) {
      found.engines.push_back(tool == "llama-bench" ? make_llama_bench_engine(*path, setup)
                                                    : make_llama_server_engine(*path, setup));
    } else {
      found.not_run.push_back(tool + ": not found " + where + " (--llama-bin DIR)");
    }
  }
  if (wanted(search, "ollama")) {
    if (auto path = find_executable("ollama")) {
      found.engines.push_back(make_ollama_engine(*path, setup));
    } else {
      found.not_run.push_back("ollama: not found on PATH");
    }
  }
  if (wanted(search, "vllm")) {
    if (find_executable("vllm")) {
      found.not_run.push_back(
          "vllm: found, not run: its GGUF loading needs the model's Hugging Face tokenizer and "
          "config beside the file, which a GGUF alone does not give");
    } else {
      found.not_run.push_back("vllm: not found on PATH");
    }
  }
  return found;
}

}  // namespace tern::cli
