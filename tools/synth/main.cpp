// tern-synth: writes a random-weight GGUF model of a real architecture and shape.
//   tern-synth --preset qwen3-8b --quant Q4_K_M -o qwen3-8b-q4_k_m.gguf
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <fstream>
#include <sstream>

#include "synthetic_model.h"

int main(int argc, char** argv) {
  CLI::App app{"Write a random-weight GGUF model of a real architecture and shape.", "tern-synth"};
  std::string preset = "tiny-qwen3", quant = "F32", out;
  uint64_t seed = 1;
  std::string chat_template;
  app.add_option("--preset", preset,
                 fmt::format("Shape: {}", fmt::join(tern::synth::preset_names(), ", ")))
      ->capture_default_str();
  app.add_option("--quant", quant, "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q6_K Q4_K_M")
      ->capture_default_str();
  app.add_option("--seed", seed, "Random seed")->capture_default_str();
  app.add_option("-o,--output", out, "Output .gguf path")->required();
  app.add_option("--chat-template", chat_template,
                 "A Jinja chat template file to store (default: a minimal ChatML template)")
      ->check(CLI::ExistingFile);
  bool fast = false;
  app.add_flag("--fast-k-quants", fast,
               "Q4_K/Q6_K tensors as random blocks rather than quantized normal weights (seconds "
               "instead of minutes for 8B; for speed tests)");
  CLI11_PARSE(app, argc, argv);
  auto shape = tern::synth::preset_shape(preset);
  if (!shape) {
    fmt::print(stderr, "error: {}\n", shape.error().message);
    return 1;
  }
  tern::synth::SyntheticOptions options;
  options.quantization = quant;
  options.seed = seed;
  options.fast_k_quants = fast;
  if (!chat_template.empty()) {
    std::ifstream in(chat_template, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    options.chat_template = text.str();
  }
  auto ok = tern::synth::write_synthetic_model(out, *shape, options, true);
  if (!ok) {
    fmt::print(stderr, "error: {}\n", ok.error().message);
    return 1;
  }
  fmt::print("wrote {}\n", out);
  return 0;
}
