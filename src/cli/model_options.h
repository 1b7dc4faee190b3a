// The flags every command that loads a model shares: --model, --device, --threads, --ctx,
// --kv-type, --tp; and the sampling flags of run/chat.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "cli/command.h"
#include "engine/loaded_model.h"
#include "engine/request.h"

namespace tern::cli {

inline constexpr const char* kDefaultModel = "smollm2-135m";

struct ModelOptions {
  std::string model = kDefaultModel;
  std::string device = "cpu";
  size_t threads = 0;
  int64_t context = 0;
  std::string kv_type = "f16";
  int tp = 1;  // tensor parallelism: ranks (processes under mpirun) the model is split over
  // Ranks started without mpirun: rank 0's HOST:PORT and this process's rank (-1: none); the
  // environment's TERN_RENDEZVOUS / TERN_RANK when the flags are not given.
  std::string rendezvous;
  int rank = -1;
  double rendezvous_timeout = 60;  // seconds

  // `tensor_parallel`: also --tp (run, bench and serve, which follow rank 0 on the other ranks).
  void add_to(CLI::App& cmd, bool tensor_parallel = false);
  // Resolves the model name or path and loads it; errors are ready to print.
  Result<std::unique_ptr<LoadedModel>> load(const CommandContext& ctx, bool progress = true,
                                            int64_t sequences = 1) const;

  // With --tp N under mpirun or with a rendezvous, whether this process is a rank other than 0.
  // Such a rank does no I/O: the command calls follow() (with the `sequences` rank 0 loads with)
  // and returns its exit code.
  bool follows() const;
  int follow(const CommandContext& ctx, int64_t sequences = 1) const;
};

struct SamplingOptions {
  float temperature = 0.7f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;
  int64_t max_tokens = 1024;
  std::vector<std::string> stop;

  void add_to(CLI::App& cmd);
  GenerateOptions options() const;
};

// Loads just the tokenizer of a model (tokenize/detokenize).
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const CommandContext& ctx,
                                                  const std::string& model);

}  // namespace tern::cli
