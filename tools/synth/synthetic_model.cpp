#include "synthetic_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <random>
#include <string_view>

#include "backend/cpu/quant.h"
#include "base/progress_bar.h"
#include "base/thread_pool.h"
#include "io/gguf_writer.h"
#include "random_blocks.h"

namespace tern::synth {
namespace {

struct Preset {
  const char* name;
  SyntheticShape shape;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"tiny-llama", {"llama", 2, 128, 4, 2, 32, 256, 512, 2048, 10000.0f, true}},
      {"tiny-qwen2", {"qwen2", 2, 128, 4, 2, 32, 256, 512, 2048, 1000000.0f, true}},
      {"tiny-qwen3", {"qwen3", 2, 64, 4, 2, 32, 128, 512, 2048, 1000000.0f, true}},
      {"tiny-gemma3", {"gemma3", 6, 64, 4, 1, 32, 128, 512, 2048, 1000000.0f, true}},
      {"tiny-qwen3moe", {"qwen3moe", 2, 64, 4, 2, 32, 128, 512, 2048, 1000000.0f, true, 8, 2, 32}},
      {"smollm2-135m", {"llama", 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0f, true}},
      {"qwen3-0.6b", {"qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 40960, 1000000.0f, true}},
      {"qwen3-1.7b", {"qwen3", 28, 2048, 16, 8, 128, 6144, 151936, 40960, 1000000.0f, true}},
      {"qwen3-8b", {"qwen3", 36, 4096, 32, 8, 128, 12288, 151936, 40960, 1000000.0f, false}},
      {"qwen3-30b-a3b",
       {"qwen3moe", 48, 2048, 32, 4, 128, 6144, 151936, 40960, 1000000.0f, false, 128, 8, 768}},
      {"qwen3-235b-a22b",
       {"qwen3moe", 94, 4096, 64, 4, 128, 12288, 151936, 40960, 1000000.0f, false, 128, 8, 1536}},
      {"llama3-8b", {"llama", 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0f, false}},
      {"gemma3-270m", {"gemma3", 18, 640, 4, 1, 256, 2048, 262144, 32768, 1000000.0f, true}},
  };
  return kPresets;
}

// Q4_K_M's per-tensor choice (llama.cpp's recipe): Q6_K for the output and for the v/down
// projections of the first and last eighth of the layers and every third layer between.
TensorType q4_k_m_type(const std::string& role, int64_t layer, int64_t layers) {
  if (role == "output") return TensorType::Q6_K;
  if (role == "attn_v" || role == "ffn_down" || role == "ffn_down_exps") {
    const bool more_bits =
        layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
    if (more_bits) return TensorType::Q6_K;
  }
  return TensorType::Q4_K;
}

Result<TensorType> weight_type(const std::string& quant, const std::string& role, int64_t layer,
                               int64_t layers) {
  if (quant == "Q4_K_M") return q4_k_m_type(role, layer, layers);
  auto t = tensor_type_from_name(quant);
  if (!t || !cpu::can_quantize(*t)) {
    return make_error(
        "cannot write synthetic weights as {} (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q6_K "
        "Q4_K_M)",
        quant);
  }
  return *t;
}

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the rest map above U+0100.
std::string byte_token(int b) {
  auto printable = [](int c) {
    return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
  };
  int code = b;
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c) n += printable(c) ? 0 : 1;
    code = 256 + n;
  }
  std::string s;
  if (code < 0x80) {
    s += static_cast<char>(code);
  } else {
    s += static_cast<char>(0xC0 | (code >> 6));
    s += static_cast<char>(0x80 | (code & 0x3F));
  }
  return s;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

Result<SyntheticShape> preset_shape(const std::string& name) {
  for (const auto& p : presets()) {
    if (name == p.name) return p.shape;
  }
  return make_error("unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", "));
}

Result<void> write_synthetic_model(const std::string& path, const SyntheticShape& s,
                                   const SyntheticOptions& options, bool progress) {
  if (s.vocab < 262) return make_error("the synthetic vocabulary needs at least 262 tokens");
  if (s.heads % s.kv_heads != 0) return make_error("heads must be a multiple of kv_heads");
  const std::string& arch = s.architecture;
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "qwen3moe" &&
      arch != "gemma3") {
    return make_error("unknown architecture '{}'", arch);
  }
  const bool moe = arch == "qwen3moe";
  if (moe &&
      (s.experts <= 0 || s.experts_used <= 0 || s.experts_used > s.experts || s.expert_ffn <= 0)) {
    return make_error("a qwen3moe shape needs experts >= experts_used > 0 and expert_ffn > 0");
  }
  GgufWriter w;
  w.set("general.architecture", GgufValue::string(arch));
  w.set("general.name",
        GgufValue::string(fmt::format("synthetic {} {}", arch, options.quantization)));
  auto key = [&](const char* k) { return arch + "." + k; };
  w.set(key("context_length"), GgufValue::u32(static_cast<uint32_t>(s.context)));
  w.set(key("embedding_length"), GgufValue::u32(static_cast<uint32_t>(s.hidden)));
  w.set(key("block_count"), GgufValue::u32(static_cast<uint32_t>(s.layers)));
  w.set(key("feed_forward_length"), GgufValue::u32(static_cast<uint32_t>(s.ffn)));
  w.set(key("attention.head_count"), GgufValue::u32(static_cast<uint32_t>(s.heads)));
  w.set(key("attention.head_count_kv"), GgufValue::u32(static_cast<uint32_t>(s.kv_heads)));
  w.set(key("attention.key_length"), GgufValue::u32(static_cast<uint32_t>(s.head_dim)));
  w.set(key("attention.value_length"), GgufValue::u32(static_cast<uint32_t>(s.head_dim)));
  w.set(key("rope.dimension_count"), GgufValue::u32(static_cast<uint32_t>(s.head_dim)));
  w.set(key("rope.freq_base"), GgufValue::f32(s.rope_theta));
  w.set(key("attention.layer_norm_rms_epsilon"), GgufValue::f32(1e-6f));
  if (arch == "gemma3") w.set(key("attention.sliding_window"), GgufValue::u32(512));
  if (moe) {
    w.set(key("expert_count"), GgufValue::u32(static_cast<uint32_t>(s.experts)));
    w.set(key("expert_used_count"), GgufValue::u32(static_cast<uint32_t>(s.experts_used)));
    w.set(key("expert_feed_forward_length"), GgufValue::u32(static_cast<uint32_t>(s.expert_ffn)));
  }

  // A byte-level tokenizer: 256 byte tokens, three ChatML specials, filler tokens to the size.
  std::vector<GgufValue> tokens, kinds;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(GgufValue::string(byte_token(b)));
    kinds.push_back(GgufValue::i32(1));
  }
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(GgufValue::string(special));
    kinds.push_back(GgufValue::i32(3));
  }
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < s.vocab; ++i) {
    tokens.push_back(GgufValue::string(fmt::format("<|filler_{}|>", i)));
    kinds.push_back(GgufValue::i32(4));
  }
  w.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::string("qwen2"));
  w.set("tokenizer.ggml.tokens", GgufValue::array(GgufValueType::String, std::move(tokens)));
  w.set("tokenizer.ggml.token_type", GgufValue::array(GgufValueType::Int32, std::move(kinds)));
  w.set("tokenizer.ggml.merges", GgufValue::array(GgufValueType::String, {}));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(258));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(256));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  w.set("tokenizer.chat_template",
        GgufValue::string(
            !options.chat_template.empty()
                ? options.chat_template
                : "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                  "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"));

  uint64_t seed_counter = options.seed;
  // Rows are drawn and quantized on every core, in groups of 16 with their own random stream
  // (seeded by tensor and group), so the file does not depend on the number of threads.
  ThreadPool pool(0);
  // `stack` > 1: a [stack, rows, cols] tensor (a layer's experts), drawn as stack * rows rows.
  auto random_matrix = [&](const std::string& name, TensorType type, int64_t rows_each,
                           int64_t cols, float scale, float offset,
                           int64_t stack = 1) -> Result<void> {
    const uint64_t seed = seed_counter++;
    ThreadPool* workers = &pool;
    const bool direct = options.fast_k_quants && can_fill_random_blocks(type);
    const int64_t rows = rows_each * stack;
    std::vector<uint64_t> dims = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows_each)};
    if (stack > 1) dims.push_back(static_cast<uint64_t>(stack));
    return w.add_tensor(name, type, dims, [=](std::span<uint8_t> out) -> Result<void> {
      constexpr int64_t kGroup = 16;
      const auto row_bytes = out.size() / static_cast<size_t>(rows);
      const auto groups = static_cast<size_t>((rows + kGroup - 1) / kGroup);
      std::atomic<bool> failed{false};
      workers->parallel_for(groups, [&](size_t begin, size_t end, size_t) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (size_t g = begin; g < end; ++g) {
          if (direct) {
            const int64_t first = static_cast<int64_t>(g) * kGroup;
            const int64_t count = std::min(rows, first + kGroup) - first;
            const size_t blocks =
                static_cast<size_t>(count) * row_bytes / tensor_type_info(type).block_bytes;
            fill_random_blocks(type, out.data() + static_cast<size_t>(first) * row_bytes, blocks,
                               scale, seed * 0x9E3779B97F4A7C15ull + g);
            continue;
          }
          std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + g);
          std::normal_distribution<float> normal(offset, scale);
          const int64_t last = std::min(rows, static_cast<int64_t>(g + 1) * kGroup);
          for (int64_t r = static_cast<int64_t>(g) * kGroup; r < last; ++r) {
            for (auto& v : row) v = normal(rng);
            if (cpu::quantize_row(type, row.data(), out.data() + static_cast<size_t>(r) * row_bytes,
                                  cols) != row_bytes) {
              failed = true;
            }
          }
        }
      });
      if (failed) return make_error("quantizing to {} failed", tensor_type_name(type));
      return {};
    });
  };
  auto vector = [&](const std::string& name, int64_t n, float scale, float offset) -> Result<void> {
    return random_matrix(name, TensorType::F32, 1, n, scale, offset);
  };
  // Vectors are 1-D in real files.
  auto norm = [&](const std::string& name, int64_t n) -> Result<void> {
    const uint64_t seed = seed_counter++;
    return w.add_tensor(name, TensorType::F32, {static_cast<uint64_t>(n)},
                        [=](std::span<uint8_t> out) -> Result<void> {
                          std::mt19937_64 rng(seed);
                          std::normal_distribution<float> normal(1.0f, 0.1f);
                          auto* f = reinterpret_cast<float*>(out.data());
                          for (int64_t i = 0; i < n; ++i) f[i] = normal(rng);
                          return {};
                        });
  };
  (void)vector;
  const std::string& q = options.quantization;
  const float sc = options.weight_scale;
  auto type_of = [&](const char* role, int64_t layer) {
    return weight_type(q, role, layer, s.layers);
  };
  auto embd_type = type_of("token_embd", 0);
  if (!embd_type) return embd_type.error();
  TERN_TRY(random_matrix("token_embd.weight", *embd_type, s.vocab, s.hidden, 1.0f, 0.0f));
  for (int64_t l = 0; l < s.layers; ++l) {
    auto name = [&](const char* suffix) { return fmt::format("blk.{}.{}", l, suffix); };
    const int64_t qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
    struct M {
      const char* role;
      const char* name;
      int64_t rows, cols;
    };
    const M mats[] = {{"attn_q", "attn_q.weight", qd, s.hidden},
                      {"attn_k", "attn_k.weight", kvd, s.hidden},
                      {"attn_v", "attn_v.weight", kvd, s.hidden},
                      {"attn_output", "attn_output.weight", s.hidden, qd},
                      {"ffn_gate", "ffn_gate.weight", s.ffn, s.hidden},
                      {"ffn_up", "ffn_up.weight", s.ffn, s.hidden},
                      {"ffn_down", "ffn_down.weight", s.hidden, s.ffn}};
    TERN_TRY(norm(name("attn_norm.weight"), s.hidden));
    for (const auto& m : mats) {
      if (moe && std::string_view(m.role).starts_with("ffn_")) continue;
      auto t = type_of(m.role, l);
      if (!t) return t.error();
      TERN_TRY(random_matrix(name(m.name), *t, m.rows, m.cols, sc, 0.0f));
    }
    if (moe) {
      // The router stays F32, as converted files keep it; experts stacked [experts, rows, cols].
      TERN_TRY(random_matrix(name("ffn_gate_inp.weight"), TensorType::F32, s.experts, s.hidden,
                             sc * 4.0f, 0.0f));
      const M experts[] = {{"ffn_gate_exps", "ffn_gate_exps.weight", s.expert_ffn, s.hidden},
                           {"ffn_up_exps", "ffn_up_exps.weight", s.expert_ffn, s.hidden},
                           {"ffn_down_exps", "ffn_down_exps.weight", s.hidden, s.expert_ffn}};
      for (const auto& m : experts) {
        auto t = type_of(m.role, l);
        if (!t) return t.error();
        TERN_TRY(random_matrix(name(m.name), *t, m.rows, m.cols, sc, 0.0f, s.experts));
      }
    }
    TERN_TRY(norm(name("ffn_norm.weight"), s.hidden));
    if (arch == "qwen2") {
      for (auto [b, n] :
           {std::pair{"attn_q.bias", qd}, {"attn_k.bias", kvd}, {"attn_v.bias", kvd}}) {
        const uint64_t seed = seed_counter++;
        TERN_TRY(w.add_tensor(name(b), TensorType::F32, {static_cast<uint64_t>(n)},
                              [=](std::span<uint8_t> out) -> Result<void> {
                                std::mt19937_64 rng(seed);
                                std::normal_distribution<float> normal(0.0f, 0.1f);
                                auto* f = reinterpret_cast<float*>(out.data());
                                for (int64_t i = 0; i < n; ++i) f[i] = normal(rng);
                                return {};
                              }));
      }
    }
    if (arch == "qwen3" || moe || arch == "gemma3") {
      TERN_TRY(norm(name("attn_q_norm.weight"), s.head_dim));
      TERN_TRY(norm(name("attn_k_norm.weight"), s.head_dim));
    }
    if (arch == "gemma3") {
      TERN_TRY(norm(name("post_attention_norm.weight"), s.hidden));
      TERN_TRY(norm(name("post_ffw_norm.weight"), s.hidden));
    }
  }
  TERN_TRY(norm("output_norm.weight", s.hidden));
  if (!s.tied_embeddings) {
    auto t = type_of("output", 0);
    if (!t) return t.error();
    TERN_TRY(random_matrix("output.weight", *t, s.vocab, s.hidden, sc, 0.0f));
  }
  if (!progress) return w.write(path);
  std::unique_ptr<ProgressBar> bar;
  return w.write(path, [&](uint64_t done, uint64_t total) {
    if (!bar) bar = std::make_unique<ProgressBar>("writing " + path, total);
    bar->update(done);
  });
}

}  // namespace tern::synth
