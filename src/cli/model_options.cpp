#include "cli/model_options.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "config/tokenizer_spec.h"
#include "engine/tp_ranks.h"
#include "io/model_store.h"

namespace tern::cli {

void ModelOptions::add_to(CLI::App& cmd, bool tensor_parallel) {
  cmd.add_option("-m,--model", model, "Model name (see `tern list`) or path to a .gguf file")
      ->capture_default_str();
  cmd.add_option("--device", device,
                 "Where to run: cpu, or cuda (cuda:N for GPU N) in a build with the CUDA backend")
      ->check([](const std::string& v) {
        return v == "cpu" || v == "cuda" || v.starts_with("cuda:")
                   ? std::string()
                   : "--device must be cpu, cuda or cuda:N, not '" + v + "'";
      })
      ->capture_default_str();
  cmd.add_option("-t,--threads", threads, "CPU threads (0: one per hardware thread)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd.add_option("-c,--ctx", context, "Context length in tokens (0: min(model limit, 8192))")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
      ->capture_default_str();
  cmd.add_option("--kv-type", kv_type, "KV cache element type: f16, bf16, q8_0, f32")
      ->check(CLI::IsMember({"f16", "bf16", "q8_0", "f32"}, CLI::ignore_case))
      ->capture_default_str();
  if (!tensor_parallel) return;
  cmd.add_option("--tp", tp,
                 "Tensor parallelism: split the model over N processes, one rank each, started "
                 "by mpirun (`mpirun -np N tern ... --tp N`) or each with --rendezvous and "
                 "--rank; rank 0 does the I/O")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd.add_option("--rendezvous", rendezvous,
                 "Without mpirun: HOST:PORT where the --tp ranks meet over TCP; rank 0 listens "
                 "there (an address of its host the others reach), the others connect "
                 "(default: $TERN_RENDEZVOUS)");
  cmd.add_option("--rank", rank,
                 "With --rendezvous: this process's rank, 0 (listens, does the I/O) to N-1 "
                 "(default: $TERN_RANK)")
      ->check(CLI::Range(0, 1023));
  cmd.add_option("--rendezvous-timeout", rendezvous_timeout,
                 "With --rendezvous: seconds to wait for the other ranks")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
}

namespace {

// --rendezvous / --rank, or the environment's TERN_RENDEZVOUS / TERN_RANK.
Result<void> resolve_ranks(const ModelOptions& m, LoadOptions& o) {
  o.rendezvous = m.rendezvous;
  if (o.rendezvous.empty()) {
    if (const char* v = std::getenv("TERN_RENDEZVOUS"); v != nullptr) o.rendezvous = v;
  }
  o.rank = m.rank;
  if (o.rank < 0) {
    if (const char* v = std::getenv("TERN_RANK"); v != nullptr && *v != '\0') {
      const std::string text = v;
      if (text.size() > 4 || text.find_first_not_of("0123456789") != std::string::npos) {
        return make_error("TERN_RANK='{}' is not a rank number (0, 1, ...)", text);
      }
      o.rank = std::stoi(text);
    }
  }
  o.rendezvous_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(m.rendezvous_timeout * 1000.0));
  return {};
}

}  // namespace

bool ModelOptions::follows() const {
  LoadOptions o;
  if (!resolve_ranks(*this, o)) return false;  // rank 0's path reports it
  if (!o.rendezvous.empty() || o.rank >= 0) return tp > 1 && o.rank > 0;
  const LaunchedRanks r = launched_ranks();
  return tp > 1 && r.size > 1 && r.rank != 0;
}

int ModelOptions::follow(const CommandContext& ctx, int64_t sequences) const {
  // Rank 0 decides when to stop: mpirun passes a SIGINT/SIGTERM to every rank, and rank 0 then
  // finishes what it is doing (tern serve ends its streams) and tells the others. (A rank 0 that
  // dies makes mpirun end the others; over TCP, their connection to it ends and they exit.)
  // Started by hand (a rendezvous), a follower's Ctrl-C ends it: rank 0 then sees it gone.
  LoadOptions placed;
  if (resolve_ranks(*this, placed) && placed.rendezvous.empty() && placed.rank < 0) {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  }
  auto loaded = load(ctx, false, sequences);
  Result<void> done = loaded ? (*loaded)->follow() : Result<void>{loaded.error()};
  if (done) return 0;
  if (done.error().code == kErrorReportedByRank0) return 1;
  return report_error(done.error().message);
}

Result<std::unique_ptr<LoadedModel>> ModelOptions::load(const CommandContext& ctx, bool progress,
                                                        int64_t sequences) const {
  ModelStore store(ctx.global.home);
  auto path = store.resolve_model_file(model);
  if (!path) return path.error();
  LoadOptions o;
  o.device = device;
  o.threads = threads;
  o.context = context;
  o.kv_type = *tensor_type_from_name(kv_type);
  o.progress = progress && ::isatty(STDERR_FILENO);
  o.sequences = sequences;
  o.tp = tp;
  TERN_TRY(resolve_ranks(*this, o));
  return load_model_file(*path, o);
}

void SamplingOptions::add_to(CLI::App& cmd) {
  cmd.add_option("--temp,--temperature", temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  cmd.add_option("--top-k", top_k, "Keep the k most likely tokens (0: off)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--top-p", top_p, "Nucleus sampling mass (1: off)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd.add_option("--min-p", min_p, "Drop tokens below min-p x the top probability (0: off)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd.add_option("--repeat-penalty", repeat_penalty, "Repetition penalty (1: off)")
      ->check(CLI::Range(0.01f, 10.0f))
      ->capture_default_str();
  cmd.add_option("--presence-penalty", presence_penalty, "Presence penalty")
      ->check(CLI::Range(-10.0f, 10.0f))
      ->capture_default_str();
  cmd.add_option("--frequency-penalty", frequency_penalty, "Frequency penalty")
      ->check(CLI::Range(-10.0f, 10.0f))
      ->capture_default_str();
  cmd.add_option("--seed", seed, "Random seed (-1: random)")->capture_default_str();
  cmd.add_option("-n,--max-tokens", max_tokens, "Most tokens to generate")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  cmd.add_option("--stop", stop, "Stop string (repeatable)");
}

GenerateOptions SamplingOptions::options() const {
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.stop = stop;
  g.sampling.temperature = temperature;
  g.sampling.top_k = top_k;
  g.sampling.top_p = top_p <= 0.0f ? 1.0f : top_p;
  g.sampling.min_p = min_p;
  g.sampling.repetition_penalty = repeat_penalty;
  g.sampling.presence_penalty = presence_penalty;
  g.sampling.frequency_penalty = frequency_penalty;
  if (seed >= 0) g.sampling.seed = static_cast<uint64_t>(seed);
  return g;
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const CommandContext& ctx,
                                                  const std::string& model) {
  ModelStore store(ctx.global.home);
  auto path = store.resolve_model_file(model);
  if (!path) return path.error();
  auto file = GgufFile::open(*path);
  if (!file) return file.error();
  auto spec = tokenizer_spec_from_gguf(*file);
  if (!spec) return spec.error();
  return Tokenizer::from_spec(*spec);
}

}  // namespace tern::cli
