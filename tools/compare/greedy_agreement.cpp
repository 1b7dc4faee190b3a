// tern-greedy-agreement: one engine configuration's greedy continuations of a list of prompts and
// its logits along them, for comparing two configurations run as separate processes (the CPU
// backend's kernel paths are chosen once per process: TERN_CPU_PATH=scalar|avx2|avx512; the GPU
// with --device cuda). tools/compare/greedy_agreement.py runs it twice and compares.
//   tern-greedy-agreement MODEL.gguf PROMPTS.json OUT_PREFIX [--device D] [--tokens N]
//                         [--reference REF_PREFIX]
// PROMPTS.json: a JSON array of strings (encoded with the model's tokenizer, BOS added). Writes
// OUT_PREFIX.json ({"prompts": [[ids...]], "tokens": [[ids...]], "vocab": V}: N greedy tokens a
// prompt, end-of-sequence ignored) and OUT_PREFIX.f32: the logits of every position of each
// prompt + continuation, one float32 row of V a position, prompts one after another. With
// --reference, the logits are along REF_PREFIX.json's continuations instead (teacher forcing on
// the other configuration's tokens), so both files hold the same positions.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.h"
#include "engine/loaded_model.h"

namespace {

int usage(const char* argv0) {
  fmt::print(stderr,
             "usage: {} MODEL.gguf PROMPTS.json OUT_PREFIX [--device D] [--tokens N] "
             "[--reference REF_PREFIX]\n",
             argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return usage(argv[0]);
  std::string device = "cpu", reference;
  int64_t tokens = 128;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(argv[0]);
    if (a == "--device") {
      device = argv[++i];
    } else if (a == "--tokens") {
      tokens = std::atoll(argv[++i]);
      if (tokens < 1 || tokens > 4096) {
        fmt::print(stderr, "error: --tokens must be 1 to 4096\n");
        return 2;
      }
    } else if (a == "--reference") {
      reference = argv[++i];
    } else {
      return usage(argv[0]);
    }
  }
  std::ifstream in(argv[2]);
  auto prompts = nlohmann::json::parse(in, nullptr, false);
  if (prompts.is_discarded() || !prompts.is_array()) {
    fmt::print(stderr, "error: {} is not a JSON array of prompt strings\n", argv[2]);
    return 1;
  }
  nlohmann::json ref;
  if (!reference.empty()) {
    std::ifstream r(reference + ".json");
    ref = nlohmann::json::parse(r, nullptr, false);
    if (ref.is_discarded() || !ref.contains("tokens") || ref["tokens"].size() != prompts.size()) {
      fmt::print(stderr, "error: {}.json is not an output of this tool for these prompts\n",
                 reference);
      return 1;
    }
  }
  tern::LoadOptions o;
  o.context = 1024;
  o.progress = false;
  o.device = device;
  auto model = tern::load_model_file(argv[1], o);
  if (!model) {
    fmt::print(stderr, "error: {}\n", model.error().message);
    return 1;
  }
  const auto vocab = (*model)->model->shape().vocab;
  tern::Engine engine(**model, tern::EngineOptions{.parallel = 1, .prefix_cache = false});
  tern::GenerateOptions go;
  go.max_tokens = tokens;
  go.ignore_eos = true;
  const std::string logits_path = std::string(argv[3]) + ".f32";
  const std::string tmp = logits_path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    fmt::print(stderr, "error: cannot write {}\n", tmp);
    return 1;
  }
  nlohmann::json out{
      {"prompts", nlohmann::json::array()}, {"tokens", nlohmann::json::array()}, {"vocab", vocab}};
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (!prompts[p].is_string()) {
      fmt::print(stderr, "error: prompt {} is not a string\n", p);
      return 1;
    }
    const auto ids = (*model)->tokenizer->encode(prompts[p].get<std::string>(), true, false);
    tern::Request request;
    request.prompt = ids;
    request.options = go;
    auto got = engine.generate(std::move(request));
    if (!got) {
      fmt::print(stderr, "error: {}\n", got.error().message);
      return 1;
    }
    std::vector<int32_t> seq = ids;
    const auto& along =
        reference.empty() ? got->tokens : ref["tokens"][p].get<std::vector<int32_t>>();
    seq.insert(seq.end(), along.begin(), along.end());
    auto logits = engine.score(seq);
    if (!logits) {
      fmt::print(stderr, "error: {}\n", logits.error().message);
      return 1;
    }
    if (std::fwrite(logits->data(), sizeof(float), logits->size(), f) != logits->size()) {
      fmt::print(stderr, "error: writing {} failed\n", tmp);
      return 1;
    }
    out["prompts"].push_back(ids);
    out["tokens"].push_back(got->tokens);
  }
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), logits_path.c_str()) != 0) {
    fmt::print(stderr, "error: writing {} failed\n", logits_path);
    return 1;
  }
  const std::string json_path = std::string(argv[3]) + ".json";
  {
    std::ofstream j(json_path + ".tmp");
    j << out.dump() << "\n";
    if (!j) {
      fmt::print(stderr, "error: writing {} failed\n", json_path);
      return 1;
    }
  }
  if (std::rename((json_path + ".tmp").c_str(), json_path.c_str()) != 0) {
    fmt::print(stderr, "error: writing {} failed\n", json_path);
    return 1;
  }
  return 0;
}
