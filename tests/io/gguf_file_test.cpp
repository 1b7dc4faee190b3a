// The GGUF reader and writer: round trips of every value type, split files, and a clear error
// (never a crash) for every kind of corruption.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "config/model_info.h"
#include "config/tokenizer_spec.h"
#include "gguf_sample.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"

namespace tern {
namespace {

std::vector<uint8_t> sample_bytes(uint32_t version = 3, uint32_t alignment = 32) {
  GgufWriter writer(version, alignment);
  std::vector<std::vector<uint8_t>> payload;
  testing::fill_sample(writer, payload);
  auto bytes = writer.to_bytes();
  EXPECT_TRUE(bytes.ok());
  return *bytes;
}

Result<GgufFile> parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::parse(bytes, "test.gguf");
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto file = parse(bytes);
  ASSERT_FALSE(file.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_NE(file.error().message.find(needle), std::string::npos) << file.error().message;
}

// Byte offset of the first occurrence of `needle` in `bytes`.
size_t find_bytes(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  EXPECT_NE(it, bytes.end()) << needle;
  return static_cast<size_t>(it - bytes.begin());
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof(T));
}

TEST(GgufFile, RoundTripsEveryValueType) {
  for (uint32_t version : {2u, 3u}) {
    auto bytes = sample_bytes(version);
    auto file = parse(bytes);
    ASSERT_TRUE(file.ok()) << file.error().message;
    EXPECT_EQ(file->version(), version);
    const auto& md = file->metadata();
    EXPECT_EQ(md.find("test.u8")->as_uint(), 250u);
    EXPECT_EQ(md.find("test.i8")->as_int(), -120);
    EXPECT_EQ(md.find("test.u16")->as_uint(), 65000u);
    EXPECT_EQ(md.find("test.i16")->as_int(), -32000);
    EXPECT_EQ(md.find("test.u32")->as_uint(), 4000000000u);
    EXPECT_EQ(md.find("test.i32")->as_int(), -2000000000);
    EXPECT_EQ(md.find("test.u64")->as_uint(), 18000000000000000000ull);
    EXPECT_EQ(md.find("test.i64")->as_int(), -9000000000000000000ll);
    EXPECT_EQ(md.find("test.f32")->as_float(), 1.5);
    EXPECT_EQ(md.find("test.f64")->as_float(), -2.25e300);
    EXPECT_EQ(md.find("test.bool")->as_bool(), true);
    EXPECT_EQ(*md.find("test.empty_string")->as_string(), "");
    EXPECT_EQ(*md.find("general.name")->as_string(), "sample \"quoted\" ünïcödé");
    const GgufArray* nested = md.find("test.nested")->as_array();
    ASSERT_NE(nested, nullptr);
    ASSERT_EQ(nested->items.size(), 2u);
    EXPECT_EQ(*nested->items[0].as_array()->items[1].as_string(), "bc");
    EXPECT_EQ(nested->items[1].as_array()->items[0].as_uint(), 7u);
    EXPECT_TRUE(md.find("test.array_empty")->as_array()->items.empty());
    EXPECT_EQ(md.find("test.u8")->type, GgufValueType::UInt8);
    EXPECT_EQ(md.find("test.f32")->type, GgufValueType::Float32);

    ASSERT_EQ(file->tensors().size(), 4u);
    const GgufTensor* q = file->find_tensor("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, TensorType::Q4_0);
    EXPECT_EQ(q->shape, (std::vector<uint64_t>{64, 3}));
    EXPECT_EQ(q->size_bytes, 108u);
    EXPECT_EQ(q->data[0], static_cast<uint8_t>(108 & 0xff));
    EXPECT_EQ(q->data[1], static_cast<uint8_t>((131 + 108) & 0xff));
    for (const auto& t : file->tensors()) {
      EXPECT_EQ((t.data - bytes.data()) % file->alignment(), 0u) << t.name;
    }
  }
}

TEST(GgufFile, HonoursGeneralAlignment) {
  auto bytes = sample_bytes(3, 256);
  auto file = parse(bytes);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->alignment(), 256u);
  for (const auto& t : file->tensors()) {
    EXPECT_EQ((t.data - bytes.data()) % 256, 0) << t.name;
  }
}

TEST(GgufFile, EveryTruncationIsAnErrorOrAValidPrefix) {
  auto bytes = sample_bytes();
  auto full = parse(bytes);
  ASSERT_TRUE(full.ok());
  uint64_t data_end = 0;
  for (const auto& t : full->tensors()) {
    data_end =
        std::max<uint64_t>(data_end, static_cast<uint64_t>(t.data - bytes.data()) + t.size_bytes);
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<long>(n));
    auto file = parse(prefix);
    if (n >= data_end) {
      EXPECT_TRUE(file.ok()) << "prefix " << n << ": " << file.error().message;
    } else {
      ASSERT_FALSE(file.ok()) << "prefix of " << n << " bytes parsed";
      EXPECT_NE(file.error().message.find("test.gguf: offset"), std::string::npos);
    }
  }
}

TEST(GgufFile, RejectsWrongMagicAndVersions) {
  auto bytes = sample_bytes();
  auto bad = bytes;
  bad[0] = 'X';
  expect_error(bad, "not a GGUF file");
  bad = bytes;
  poke<uint32_t>(bad, 4, 1);
  expect_error(bad, "unsupported GGUF version 1");
  poke<uint32_t>(bad, 4, 4);
  expect_error(bad, "unsupported GGUF version 4");
  poke<uint32_t>(bad, 4, 0x03000000u);
  expect_error(bad, "big-endian");
  expect_error({}, "truncated");
}

TEST(GgufFile, RejectsAbsurdCountsWithoutAllocating) {
  auto bytes = sample_bytes();
  auto bad = bytes;
  poke<uint64_t>(bad, 8, uint64_t{1} << 60);  // tensor count
  expect_error(bad, "tensor count");
  bad = bytes;
  poke<uint64_t>(bad, 16, uint64_t{1} << 60);  // metadata count
  expect_error(bad, "metadata count");
  bad = bytes;
  // The first key's string length.
  poke<uint64_t>(bad, 24, uint64_t{1} << 62);
  expect_error(bad, "metadata key has length");
  bad = bytes;
  // test.array_i32's element count sits after its key, type (u32) and element type (u32).
  size_t key = find_bytes(bad, "test.array_i32");
  poke<uint64_t>(bad, key + 14 + 8, uint64_t{1} << 61);
  expect_error(bad, "cannot fit");
}

TEST(GgufFile, RejectsUnknownTypes) {
  auto bytes = sample_bytes();
  auto bad = bytes;
  size_t key = find_bytes(bad, "test.u8");
  poke<uint32_t>(bad, key + 7, 99);
  expect_error(bad, "unknown value type 99");

  bad = bytes;
  size_t name = find_bytes(bad, "output_norm.weight");
  // name, n_dims (u32), one dim (u64), then the type.
  poke<uint32_t>(bad, name + 18 + 4 + 8, 31);
  expect_error(bad, "unknown type id 31");
}

TEST(GgufFile, RejectsBadTensorTables) {
  auto bytes = sample_bytes();
  size_t name = find_bytes(bytes, "output_norm.weight");
  size_t offset_at = name + 18 + 4 + 8 + 4;
  auto bad = bytes;
  poke<uint64_t>(bad, offset_at, 0);  // same offset as the first tensor
  expect_error(bad, "overlap");
  bad = bytes;
  poke<uint64_t>(bad, offset_at, uint64_t{1} << 40);
  expect_error(bad, "lies outside");
  bad = bytes;
  poke<uint64_t>(bad, offset_at, 33);
  expect_error(bad, "not a multiple of the alignment");
  bad = bytes;
  poke<uint32_t>(bad, name + 18, 5);
  expect_error(bad, "5 dimensions");
  bad = bytes;
  std::memcpy(bad.data() + find_bytes(bad, "blk.0.ffn_up.weight"), "blk.0.attn_q.weight", 19);
  expect_error(bad, "duplicate tensor name");
  bad = bytes;
  size_t q = find_bytes(bad, "blk.0.attn_q.weight");
  poke<uint64_t>(bad, q + 19 + 4, 48);  // a Q4_0 row of 48 elements is not whole blocks
  expect_error(bad, "not a multiple of the Q4_0 block size");
}

TEST(GgufFile, RejectsDuplicateKeysAndBadAlignment) {
  GgufWriter writer;
  writer.set("general.alignment", GgufValue::u32(48));
  auto bytes = writer.to_bytes();
  expect_error(*bytes, "power-of-two");

  auto sample = sample_bytes();
  std::memcpy(sample.data() + find_bytes(sample, "test.i8"), "test.u8", 7);
  expect_error(sample, "duplicate metadata key 'test.u8'");
}

TEST(GgufFile, RejectsDeepNesting) {
  GgufValue v = GgufValue::u8(1);
  for (int i = 0; i < 12; ++i) v = GgufValue::array(v.type, {v});
  GgufWriter writer;
  writer.set("deep", v);
  auto bytes = writer.to_bytes();
  expect_error(*bytes, "nested deeper");
}

TEST(GgufFile, WritesAndOpensSplitFiles) {
  auto dir = std::filesystem::temp_directory_path() / ("tern-split-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  GgufWriter writer;
  std::vector<std::vector<uint8_t>> payload;
  testing::fill_sample(writer, payload);
  auto paths = writer.write_split((dir / "model").string(), 3);
  ASSERT_TRUE(paths.ok()) << paths.error().message;
  ASSERT_EQ(paths->size(), 2u);
  EXPECT_EQ(std::filesystem::path((*paths)[1]).filename(), "model-00002-of-00002.gguf");

  auto file = GgufFile::open((*paths)[0]);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->tensors().size(), 4u);
  EXPECT_EQ(file->paths().size(), 2u);
  EXPECT_EQ(file->find_tensor("output_norm.weight")->split_index, 1u);
  EXPECT_EQ(file->find_tensor("output_norm.weight")->data[0], static_cast<uint8_t>(10));
  EXPECT_EQ(*file->metadata().find("general.architecture")->as_string(), "llama");

  std::filesystem::remove((*paths)[1]);
  auto missing = GgufFile::open((*paths)[0]);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("model-00002-of-00002.gguf"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(GgufFile, WriterLeavesNoPartialFileOnError) {
  auto dir = std::filesystem::temp_directory_path() / ("tern-atomic-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  GgufWriter writer;
  ASSERT_TRUE(writer
                  .add_tensor("t", TensorType::F32, {4},
                              [](std::span<uint8_t>) -> Result<void> { return Error{"boom"}; })
                  .ok());
  auto written = writer.write((dir / "x.gguf").string());
  ASSERT_FALSE(written.ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

TEST(ModelInfo, ParsesTypedSummaryAndTokenizerSpec) {
  auto bytes = sample_bytes();
  auto file = parse(bytes);
  ASSERT_TRUE(file.ok());
  auto info = model_info_from_gguf(*file);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->architecture, "llama");
  EXPECT_EQ(info->context_length, 2048u);
  EXPECT_EQ(info->embedding_length, 64u);
  EXPECT_EQ(info->vocab_size, 4u);
  auto spec = tokenizer_spec_from_gguf(*file);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->model, "gpt2");
  EXPECT_EQ(spec->tokens.size(), 4u);
  EXPECT_EQ(spec->eos_id, 3);
  EXPECT_EQ(spec->merges, std::vector<std::string>{"a b"});
}

TEST(ModelInfo, RejectsOutOfRangeTokenIds) {
  GgufWriter writer;
  writer.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  writer.set("tokenizer.ggml.tokens",
             GgufValue::array(GgufValueType::String, {GgufValue::string("a")}));
  writer.set("tokenizer.ggml.eos_token_id", GgufValue::u32(7));
  auto bytes = writer.to_bytes();
  auto file = parse(*bytes);
  ASSERT_TRUE(file.ok());
  auto spec = tokenizer_spec_from_gguf(*file);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.error().message.find("eos_token_id"), std::string::npos);
}

}  // namespace
}  // namespace tern
