// The engines `tern bench compare` runs on one GGUF file: Tern itself and whichever peers are
// installed (llama.cpp's llama-bench and llama-server, Ollama). Each measures, as BENCHMARKS.md
// defines them, prefill tok/s (prompt tokens / time to the first token) and decode tok/s
// (generated tokens / decode time) with the prompt already in the KV cache.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/error.h"

namespace tern::cli {

struct CompareSetup {
  std::string model_file;  // absolute path of the GGUF file every engine loads
  int64_t prompt_tokens = 512;
  int64_t gen_tokens = 128;
  int threads = 0;
  bool gpu = false;      // all layers on the GPU (peers: -ngl 99, flash attention on)
  std::string work_dir;  // servers' logs
};

struct Measurement {
  double prefill_tok_s = 0;
  double decode_tok_s = 0;
};

class CompareEngine {
 public:
  virtual ~CompareEngine() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const { return {}; }
  // The command lines it runs, for the report.
  virtual std::string commands() const = 0;
  // Once before the runs: start a server, load or register the model.
  virtual Result<void> prepare() { return {}; }
  virtual Result<Measurement> measure(int run) = 0;
  virtual void finish() {}
};

struct EngineSearch {
  std::string tern;               // this executable
  std::string llama_bin;          // a folder with llama-bench / llama-server; empty: $PATH
  std::vector<std::string> only;  // engine names to run (tern, llama-bench, llama-server, ollama)
};

struct FoundEngines {
  std::vector<std::unique_ptr<CompareEngine>> engines;  // tern first
  std::vector<std::string> not_run;  // "vllm: found, but ...", "ollama: not installed"
};

FoundEngines find_engines(const CompareSetup& setup, const EngineSearch& search);

}  // namespace tern::cli
