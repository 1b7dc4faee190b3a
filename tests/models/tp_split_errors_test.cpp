// Shapes a tensor-parallel group cannot split give load errors that name what does not divide
// (heads, KV heads, the MLP, a quantization block), and what does split loads with each rank's
// share of the KV heads. Loading cuts the weights without talking to the other ranks, so one
// process plays rank `r` of a group of `n` here (no MPI needed).
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu_device/cpu_device.h"
#include "models/model.h"
#include "synthetic_model.h"

namespace tern {
namespace {

class TpSplit : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const auto& p : paths_) std::filesystem::remove(p);
  }

  // Loads `shape` (quantized as `quant`) as rank `rank` of `ranks`.
  Result<std::unique_ptr<Model>> load(const synth::SyntheticShape& shape, const char* quant,
                                      int rank, int ranks) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("tern-tp-split-" + std::to_string(::getpid()) +
                                                   "-" + std::to_string(paths_.size()) + ".gguf"))
            .string();
    paths_.push_back(path);
    synth::SyntheticOptions options;
    options.quantization = quant;
    auto written = synth::write_synthetic_model(path, shape, options);
    if (!written) return written.error();
    auto file = GgufFile::open(path);
    if (!file) return file.error();
    files_.push_back(std::make_unique<GgufFile>(std::move(*file)));
    return load_model(*files_.back(), device_, TensorParallel{comm_.get(), rank, ranks});
  }

  static synth::SyntheticShape tiny() { return *synth::preset_shape("tiny-llama"); }

  CpuDevice device_{1};
  std::unique_ptr<Communicator> comm_ = make_single_rank_communicator();
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<GgufFile>> files_;
};

void expect_error(const Result<std::unique_ptr<Model>>& r, const std::string& part) {
  ASSERT_FALSE(r.ok()) << "loaded, but should fail with '" << part << "'";
  EXPECT_NE(r.error().message.find(part), std::string::npos) << r.error().message;
}

TEST_F(TpSplit, HeadsThatDoNotDivide) {
  expect_error(load(tiny(), "F32", 0, 3), "attention heads (4) to divide by 3");
}

TEST_F(TpSplit, KvHeadsThatNeitherDivideNorAreDividedBy) {
  auto s = tiny();
  s.heads = 6;
  s.kv_heads = 3;
  s.hidden = 192;
  expect_error(load(s, "F32", 1, 2), "KV heads (3) to divide by 2 or 2 to divide by them");
}

TEST_F(TpSplit, MlpThatDoesNotDivide) {
  auto s = tiny();
  s.ffn = 99;
  expect_error(load(s, "F32", 0, 2), "feed-forward size (99) to divide by 2");
}

TEST_F(TpSplit, SliceOffAQuantizationBlock) {
  // Q4_K stores 256-value blocks: 2 ranks' halves of o's 4 x 64 input columns are 128 wide.
  auto s = tiny();
  s.hidden = 256;
  s.head_dim = 64;
  s.ffn = 512;
  expect_error(load(s, "Q4_K", 1, 2), "stores blocks of 256 values");
  // Q8_0's 32-value blocks: 4 heads x 32 / 4 ranks = 32 columns of o each is fine.
  EXPECT_TRUE(load(tiny(), "Q8_0", 3, 4).ok());
}

TEST_F(TpSplit, EachRankCachesItsKvHeads) {
  for (int ranks : {1, 2, 4}) {
    auto m = load(tiny(), "F32", ranks - 1, ranks);  // 2 KV heads; 4 ranks replicate them
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ((*m)->shape().ranks, ranks);
    EXPECT_EQ((*m)->shape().cached_kv_heads(), ranks == 1 ? 2 : 1);
    EXPECT_EQ((*m)->kv_config(64, TensorType::F16).kv_heads, ranks == 1 ? 2 : 1);
    EXPECT_EQ((*m)->shape().vocab, 512);  // logits stay whole-vocabulary
  }
}

TEST_F(TpSplit, VocabularyTooSmallForTheRanks) {
  auto s = tiny();
  s.heads = 8;
  s.kv_heads = 8;
  s.hidden = 256;
  s.ffn = 8 * 32;
  s.vocab = 300;  // 8 ranks: ceil(300 / 8) = 38 rows each, and rank 7 would start at 266: fine
  EXPECT_TRUE(load(s, "F32", 7, 8).ok());
}

}  // namespace
}  // namespace tern
