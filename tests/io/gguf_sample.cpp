#include "gguf_sample.h"

namespace tern::testing {

void fill_sample(GgufWriter& writer, std::vector<std::vector<uint8_t>>& payload) {
  writer.set("general.architecture", GgufValue::string("llama"));
  writer.set("general.name", GgufValue::string("sample \"quoted\" ünïcödé"));
  writer.set("test.u8", GgufValue::u8(250));
  writer.set("test.i8", GgufValue::i8(-120));
  writer.set("test.u16", GgufValue::u16(65000));
  writer.set("test.i16", GgufValue::i16(-32000));
  writer.set("test.u32", GgufValue::u32(4000000000u));
  writer.set("test.i32", GgufValue::i32(-2000000000));
  writer.set("test.u64", GgufValue::u64(18000000000000000000ull));
  writer.set("test.i64", GgufValue::i64(-9000000000000000000ll));
  writer.set("test.f32", GgufValue::f32(1.5f));
  writer.set("test.f64", GgufValue::f64(-2.25e300));
  writer.set("test.bool", GgufValue::boolean(true));
  writer.set("test.empty_string", GgufValue::string(""));
  writer.set("test.array_i32",
             GgufValue::array(GgufValueType::Int32, {GgufValue::i32(1), GgufValue::i32(-2)}));
  writer.set("test.array_empty", GgufValue::array(GgufValueType::Float32, {}));
  writer.set("test.nested",
             GgufValue::array(GgufValueType::Array,
                              {GgufValue::array(GgufValueType::String,
                                                {GgufValue::string("a"), GgufValue::string("bc")}),
                               GgufValue::array(GgufValueType::UInt8, {GgufValue::u8(7)})}));
  writer.set("llama.context_length", GgufValue::u32(2048));
  writer.set("llama.embedding_length", GgufValue::u32(64));
  writer.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  writer.set("tokenizer.ggml.tokens",
             GgufValue::array(GgufValueType::String,
                              {GgufValue::string("a"), GgufValue::string("b"),
                               GgufValue::string("ab"), GgufValue::string("<eos>")}));
  writer.set("tokenizer.ggml.merges",
             GgufValue::array(GgufValueType::String, {GgufValue::string("a b")}));
  writer.set("tokenizer.ggml.eos_token_id", GgufValue::u32(3));

  auto add = [&](const char* name, TensorType type, std::vector<uint64_t> shape, size_t bytes) {
    std::vector<uint8_t> data(bytes);
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>((i * 131 + bytes) & 0xff);
    payload.push_back(std::move(data));
    auto ok = writer.add_tensor(name, type, std::move(shape), payload.back());
    (void)ok;
  };
  add("token_embd.weight", TensorType::F32, {64, 4}, 64 * 4 * 4);
  add("blk.0.attn_q.weight", TensorType::Q4_0, {64, 3}, 2 * 18 * 3);
  add("blk.0.ffn_up.weight", TensorType::Q4_K, {256, 2}, 144 * 2);
  add("output_norm.weight", TensorType::BF16, {5}, 10);
}

}  // namespace tern::testing
