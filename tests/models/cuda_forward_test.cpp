// The CUDA backend end to end: the logits of the transformers fixtures (tests/data/models, F32
// weights) computed on the GPU match transformers' and the CPU backend's; random-weight models of
// every architecture in quantized types give the CPU's logits within the rounding of their 8-bit
// activations, for one whole-prompt pass (prefill GEMM), a decode one token at a time (GEMV) and a
// batch of several sequences. Skipped when no CUDA GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu_device/cpu_device.h"
#include "backend/cuda/cuda_device.h"
#include "config/hf_model.h"
#include "models/model.h"
#include "synthetic_model.h"

namespace tern {
namespace {

const std::string kModels = std::string(TERN_TEST_DATA_DIR) + "/models";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Stats {
  double max_abs = 0, rel_rms = 0;
};

Stats compare(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  Stats s;
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    s.max_abs = std::max(s.max_abs, std::isfinite(got[i]) ? std::fabs(e) : INFINITY);
    err += e * e;
    norm += static_cast<double>(want[i]) * want[i];
  }
  s.rel_rms = std::sqrt(err / std::max(norm, 1e-30));
  return s;
}

// Logits of every token of `ids`, fed in chunks of `chunk`, on `device`.
std::vector<float> run(const GgufFile& file, Device& device, const std::vector<int32_t>& ids,
                       size_t chunk, TensorType kv = TensorType::F32) {
  auto model = load_model(file, device);
  EXPECT_TRUE(model.ok()) << model.error().message;
  if (!model.ok()) return {};
  auto cache = KvCache::create(device, (*model)->kv_config(1024, kv, 16));
  EXPECT_TRUE(cache.ok());
  SequenceKv seq;
  std::vector<float> logits;
  for (size_t at = 0; at < ids.size(); at += chunk) {
    const size_t n = std::min(chunk, ids.size() - at);
    EXPECT_TRUE(cache->reserve(seq, seq.length + static_cast<int64_t>(n)));
    SequenceBatch b{std::span(ids).subspan(at, n), &seq, true};
    auto ok = forward_logits(**model, {&b, 1}, *cache, logits);
    EXPECT_TRUE(ok.ok()) << ok.error().message;
  }
  return logits;
}

// Speculative decoding's verify pass: `prefix` causal, then one forward over a token tree;
// the tree tokens' logits.
std::vector<float> run_tree(const GgufFile& file, Device& device,
                            const std::vector<int32_t>& prefix, const std::vector<int32_t>& draft,
                            const std::vector<int32_t>& parents) {
  auto model = load_model(file, device);
  EXPECT_TRUE(model.ok()) << model.error().message;
  if (!model.ok()) return {};
  auto cache = KvCache::create(device, (*model)->kv_config(1024, TensorType::F16, 16));
  EXPECT_TRUE(cache.ok());
  SequenceKv seq;
  EXPECT_TRUE(cache->reserve(seq, static_cast<int64_t>(prefix.size() + draft.size())));
  std::vector<float> ignored, logits;
  SequenceBatch head{prefix, &seq, false};
  EXPECT_TRUE(forward_logits(**model, {&head, 1}, *cache, ignored).ok());
  SequenceBatch tree{draft, &seq, true};
  tree.tree_parents = parents;
  auto ok = forward_logits(**model, {&tree, 1}, *cache, logits);
  EXPECT_TRUE(ok.ok()) << ok.error().message;
  return logits;
}

// A CUDA device (the test skips without a GPU) and the CPU reference beside it.
template <typename Base>
class GpuAndCpu : public Base {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
    auto d = CudaDevice::create(0);
    ASSERT_TRUE(d.ok()) << d.error().message;
    gpu_ = std::move(*d);
  }
  CpuDevice cpu_{4};
  std::unique_ptr<CudaDevice> gpu_;
};

class CudaForwardShapes : public GpuAndCpu<::testing::Test> {};
class CudaForward : public GpuAndCpu<::testing::TestWithParam<std::string>> {};

TEST_P(CudaForward, FixtureLogitsMatchTransformersAndTheCpu) {
  const std::string arch = GetParam();
  auto file = open_hf_model(kModels + "/" + arch);
  ASSERT_TRUE(file.ok()) << file.error().message;
  const auto ids = nlohmann::json::parse(read_text(kModels + "/" + arch + "/input_ids.json"))
                       .get<std::vector<int32_t>>();
  const std::string raw = read_text(kModels + "/" + arch + "/logits.f32");
  std::vector<float> want(raw.size() / 4);
  std::memcpy(want.data(), raw.data(), want.size() * 4);

  const auto cpu = run(*file, cpu_, ids, ids.size());
  const auto gpu = run(*file, *gpu_, ids, ids.size());
  const auto gpu_decode = run(*file, *gpu_, ids, 1);
  const Stats vs_hf = compare(gpu, want), vs_cpu = compare(gpu, cpu),
              decode = compare(gpu_decode, want);
  std::printf(
      "[cuda-forward] %-8s fixture: gpu-vs-transformers max %.3g, gpu-vs-cpu max %.3g, "
      "decode-vs-transformers max %.3g\n",
      arch.c_str(), vs_hf.max_abs, vs_cpu.max_abs, decode.max_abs);
  RecordProperty("gpu_vs_transformers_max_abs", std::to_string(vs_hf.max_abs));
  EXPECT_LT(vs_hf.max_abs, 1e-3);
  EXPECT_LT(vs_cpu.max_abs, 1e-3);
  EXPECT_LT(decode.max_abs, 1e-3);
}

TEST_P(CudaForward, QuantizedRandomModelsMatchTheCpu) {
  const std::string preset = "tiny-" + GetParam();
  for (const char* quant : {"Q8_0", "Q4_K_M"}) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              (preset + "-" + quant + "-" + std::to_string(::getpid()) + ".gguf"))
                                 .string();
    auto shape = synth::preset_shape(preset);
    ASSERT_TRUE(shape.ok());
    if (std::string(quant) == "Q4_K_M") {  // K-quant rows need multiples of 256 columns
      shape->hidden = 256;
      shape->heads = 8;
      shape->kv_heads = 2;
      shape->ffn = 512;
    }
    synth::SyntheticOptions options;
    options.quantization = quant;
    options.weight_scale = 0.08f;
    ASSERT_TRUE(synth::write_synthetic_model(path, *shape, options).ok());
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.error().message;
    std::vector<int32_t> ids(40);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % 256);
    const auto cpu = run(*file, cpu_, ids, ids.size(), TensorType::F16);
    const auto gpu = run(*file, *gpu_, ids, ids.size(), TensorType::F16);
    const auto gpu_steps = run(*file, *gpu_, ids, 7, TensorType::F16);
    const auto gpu_decode = run(*file, *gpu_, ids, 1, TensorType::F16);
    const Stats prefill = compare(gpu, cpu), chunked = compare(gpu_steps, cpu),
                decode = compare(gpu_decode, cpu);
    std::printf(
        "[cuda-forward] %-12s %-6s vs cpu rel rms: prefill %.3g, chunks of 7 %.3g, "
        "decode %.3g\n",
        preset.c_str(), quant, prefill.rel_rms, chunked.rel_rms, decode.rel_rms);
    EXPECT_LT(prefill.rel_rms, 0.05) << quant;
    EXPECT_LT(chunked.rel_rms, 0.05) << quant;
    EXPECT_LT(decode.rel_rms, 0.05) << quant;
    const std::vector<int32_t> prefix(ids.begin(), ids.begin() + 30);
    const std::vector<int32_t> draft = {11, 45, 46, 101, 102, 200, 201, 17, 18, 99};
    const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 5, -1, 7, 3};
    const Stats tree = compare(run_tree(*file, *gpu_, prefix, draft, parents),
                               run_tree(*file, cpu_, prefix, draft, parents));
    std::printf("[cuda-forward] %-12s %-6s token tree vs cpu rel rms %.3g\n", preset.c_str(), quant,
                tree.rel_rms);
    EXPECT_LT(tree.rel_rms, 0.05) << quant;
    std::filesystem::remove(path);
  }
}

// Which part of a model makes the GPU's logits leave the CPU's (2026-12-05, H100: Q8_0 tiny-llama
// decode 7e-3 rel rms from the CPU while tiny-qwen3 agreed to 7e-8): the same two architectures
// with each other's widths, one layer, and Q4_1 (the real SmolLM2's type), decode and prefill.
TEST_F(CudaForwardShapes, QuantizedShapeVariantsMatchTheCpu) {
  struct Variant {
    const char* name;
    const char* preset;
    const char* quant;
    int64_t hidden, ffn, layers;
  };
  const Variant variants[] = {
      {"llama 128/256", "tiny-llama", "Q8_0", 128, 256, 2},
      {"llama 128/128", "tiny-llama", "Q8_0", 128, 128, 2},
      {"llama 64/128", "tiny-llama", "Q8_0", 64, 128, 2},
      {"llama 64/256", "tiny-llama", "Q8_0", 64, 256, 2},
      {"llama 1 layer", "tiny-llama", "Q8_0", 128, 256, 1},
      {"qwen3 64/128", "tiny-qwen3", "Q8_0", 64, 128, 2},
      {"qwen3 128/256", "tiny-qwen3", "Q8_0", 128, 256, 2},
      {"qwen3 64/256", "tiny-qwen3", "Q8_0", 64, 256, 2},
      {"llama Q4_1", "tiny-llama", "Q4_1", 128, 256, 2},
      {"qwen3 Q4_1", "tiny-qwen3", "Q4_1", 64, 128, 2},
  };
  for (const auto& v : variants) {
    auto shape = synth::preset_shape(v.preset);
    ASSERT_TRUE(shape.ok());
    shape->hidden = v.hidden;
    shape->ffn = v.ffn;
    shape->layers = v.layers;
    const std::string path =
        (std::filesystem::temp_directory_path() / ("tern-shape-" + std::to_string(&v - variants) +
                                                   "-" + std::to_string(::getpid()) + ".gguf"))
            .string();
    synth::SyntheticOptions options;
    options.quantization = v.quant;
    options.weight_scale = 0.08f;
    ASSERT_TRUE(synth::write_synthetic_model(path, *shape, options).ok()) << v.name;
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.error().message;
    std::vector<int32_t> ids(40);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % 256);
    const auto cpu = run(*file, cpu_, ids, ids.size(), TensorType::F16);
    const auto cpu_decode = run(*file, cpu_, ids, 1, TensorType::F16);
    const auto gpu = run(*file, *gpu_, ids, ids.size(), TensorType::F16);
    const auto gpu_decode = run(*file, *gpu_, ids, 1, TensorType::F16);
    const Stats prefill = compare(gpu, cpu), decode = compare(gpu_decode, cpu_decode);
    // Position by position: does the decode error start at the first token?
    const size_t vocab = cpu.size() / ids.size();
    std::vector<float> first_gpu(gpu_decode.begin(), gpu_decode.begin() + static_cast<long>(vocab));
    std::vector<float> first_cpu(cpu_decode.begin(), cpu_decode.begin() + static_cast<long>(vocab));
    // Row by row: the positions where the decode leaves the CPU's (and the GPU's own prefill).
    auto row = [&](const std::vector<float>& l, size_t r) {
      return std::vector<float>(l.begin() + static_cast<long>(r * vocab),
                                l.begin() + static_cast<long>((r + 1) * vocab));
    };
    char rows[256] = "";
    size_t used = 0;
    for (size_t r : {size_t{1}, size_t{2}, size_t{8}, size_t{31}, size_t{32}, size_t{39}}) {
      const int wrote = std::snprintf(rows + used, sizeof rows - used, " %zu:%.3g", r,
                                      compare(row(gpu_decode, r), row(cpu_decode, r)).rel_rms);
      used += static_cast<size_t>(std::max(wrote, 0));
    }
    std::printf(
        "[cuda-shapes] %-14s %-5s rel rms: prefill %.3g, decode %.3g (first token %.3g), gpu "
        "decode vs gpu prefill %.3g, cpu decode vs cpu prefill %.3g; decode rows%s\n",
        v.name, v.quant, prefill.rel_rms, decode.rel_rms, compare(first_gpu, first_cpu).rel_rms,
        compare(gpu_decode, gpu).rel_rms, compare(cpu_decode, cpu).rel_rms, rows);
    EXPECT_LT(prefill.rel_rms, 0.05) << v.name;
    EXPECT_LT(decode.rel_rms, 0.05) << v.name;
    std::filesystem::remove(path);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, CudaForward,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma3"));

}  // namespace
}  // namespace tern
