// The safetensors reader: valid files (dtypes, shapes, metadata, scalars, empty tensors) and
// corrupt ones, each of which must give an error naming the problem, never a crash.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tern {
namespace {

// A file from a JSON header and data bytes, as the format lays it out.
std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data) {
  const uint64_t n = header.size();
  std::vector<uint8_t> out(8 + n + data.size());
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  return out;
}

std::vector<uint8_t> floats(std::initializer_list<float> values) {
  std::vector<uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  auto f = SafetensorsFile::parse(bytes, "t.safetensors");
  return f.ok() ? std::string() : f.error().message;
}

TEST(Safetensors, ReadsTensorsAndMetadata) {
  std::vector<uint8_t> data = floats({1, 2, 3, 4, 5, 6});
  data.push_back(0x80);  // BF16 -0.0... and 1 more byte: a U8 tensor of 2 bytes below
  data.push_back(0x3f);
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[24,26]},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("empty":{"dtype":"F16","shape":[0,4],"data_offsets":[26,26]}}   )";
  auto bytes = make_file(header, data);
  auto f = SafetensorsFile::parse(bytes, "t.safetensors");
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, "a");  // in offset order
  const SafetensorsTensor* a = f->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, "F32");
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(a->elements(), 6u);
  EXPECT_EQ(a->offset, 8 + header.size());
  float v[6];
  std::memcpy(v, a->data, 24);
  EXPECT_EQ(v[5], 6.0f);
  const SafetensorsTensor* b = f->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->element_size, 2u);
  EXPECT_EQ(b->data[1], 0x3f);
  EXPECT_EQ(f->find("empty")->size_bytes, 0u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->find("nope"), nullptr);
  EXPECT_EQ(safetensors_gguf_type("BF16"), TensorType::BF16);
  EXPECT_EQ(safetensors_gguf_type("I64"), std::nullopt);
}

TEST(Safetensors, OpensAFileAndKeepsItMapped) {
  auto path = std::filesystem::temp_directory_path() /
              ("tern-st-" + std::to_string(::getpid()) + ".safetensors");
  auto bytes = make_file(R"({"x":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})",
                         std::vector<uint8_t>(8, 7));
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  auto f = SafetensorsFile::open(path.string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->path(), path.string());
  ASSERT_NE(f->mapping(), nullptr);
  EXPECT_EQ(f->find("x")->elements(), 1u);  // a scalar
  EXPECT_EQ(f->find("x")->data[7], 7);
  std::filesystem::remove(path);
  EXPECT_FALSE(SafetensorsFile::open(path.string()).ok());
}

TEST(Safetensors, CorruptFilesGiveErrors) {
  const auto d24 = floats({1, 2, 3, 4, 5, 6});
  auto expect_error = [&](const std::vector<uint8_t>& bytes, const std::string& needle) {
    std::string e = error_of(bytes);
    EXPECT_NE(e.find(needle), std::string::npos) << "error: '" << e << "' lacks '" << needle << "'";
    EXPECT_NE(e.find("t.safetensors"), std::string::npos) << e;
  };
  expect_error({1, 2, 3}, "truncated");
  // Header length larger than the file, and absurdly large.
  auto bytes = make_file("{}", {});
  bytes[0] = 200;
  expect_error(bytes, "header length 200");
  bytes[0] = 2;
  bytes[7] = 0xff;
  expect_error(bytes, "exceeds the limit");
  expect_error(make_file("[1,2]", {}), "not a JSON object");
  expect_error(make_file("{\"a\":", {}), "not valid JSON");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[6],"data_offsets":[0,28]}})", d24),
               "outside");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[6],"data_offsets":[8,4]}})", d24),
               "outside");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[5],"data_offsets":[0,24]}})", d24),
               "need 20 bytes");
  expect_error(make_file(R"({"a":{"dtype":"Q9","shape":[6],"data_offsets":[0,24]}})", d24),
               "unknown dtype 'Q9'");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[-6],"data_offsets":[0,24]}})", d24),
               "non-negative");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[6.5],"data_offsets":[0,24]}})", d24),
               "non-negative");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[6],"data_offsets":[0]}})", d24),
               "data_offsets");
  expect_error(make_file(R"({"a":{"shape":[6],"data_offsets":[0,24]}})", d24), "'dtype'");
  expect_error(make_file(R"({"a":{"dtype":"F32","data_offsets":[0,24]}})", d24), "'shape'");
  expect_error(make_file(R"({"a":[1]})", d24), "not an object");
  expect_error(
      make_file(
          R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,24]}})",
          d24),
      "overflows");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                         d24),
               "overlap");
  expect_error(make_file(R"({"__metadata__":{"k":1}})", {}), "__metadata__");
}

// Every truncation and every single-byte corruption of a valid file either parses or errors.
TEST(Safetensors, TruncationsAndBitFlipsNeverCrash) {
  auto good = make_file(R"({"__metadata__":{"f":"pt"},"a":{"dtype":"F32","shape":[2,3],)"
                        R"("data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[2],)"
                        R"("data_offsets":[24,28]}})",
                        floats({1, 2, 3, 4, 5, 6, 7}));
  ASSERT_TRUE(SafetensorsFile::parse(good, "good").ok());
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    auto f = SafetensorsFile::parse(cut, "cut");
    if (f.ok()) {
      for (const auto& t : f->tensors()) EXPECT_LE(t.offset + t.size_bytes, cut.size());
    }
  }
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t x : {uint8_t{0x01}, uint8_t{0x20}, uint8_t{0xff}}) {
      auto bad = good;
      bad[i] ^= x;
      auto f = SafetensorsFile::parse(bad, "flip");
      if (f.ok()) {
        for (const auto& t : f->tensors()) EXPECT_LE(t.offset + t.size_bytes, bad.size());
      }
    }
  }
}

}  // namespace
}  // namespace tern
