// GGUF metadata values: every type the format defines, arrays nested to any (bounded) depth.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tern {

enum class GgufValueType : uint32_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  UInt32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  UInt64 = 10,
  Int64 = 11,
  Float64 = 12,
};

std::string_view gguf_value_type_name(GgufValueType type);
bool is_known_gguf_value_type(uint32_t raw);

struct GgufValue;

struct GgufArray {
  GgufValueType element_type = GgufValueType::UInt8;
  std::vector<GgufValue> items;
};

// One metadata value. Integers keep their sign in the variant: unsigned types are held as
// uint64_t, signed ones as int64_t, floats as double; `type` records the exact wire type.
struct GgufValue {
  GgufValueType type = GgufValueType::UInt8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> data;

  static GgufValue u8(uint8_t v) { return {GgufValueType::UInt8, uint64_t{v}}; }
  static GgufValue i8(int8_t v) { return {GgufValueType::Int8, int64_t{v}}; }
  static GgufValue u16(uint16_t v) { return {GgufValueType::UInt16, uint64_t{v}}; }
  static GgufValue i16(int16_t v) { return {GgufValueType::Int16, int64_t{v}}; }
  static GgufValue u32(uint32_t v) { return {GgufValueType::UInt32, uint64_t{v}}; }
  static GgufValue i32(int32_t v) { return {GgufValueType::Int32, int64_t{v}}; }
  static GgufValue u64(uint64_t v) { return {GgufValueType::UInt64, v}; }
  static GgufValue i64(int64_t v) { return {GgufValueType::Int64, v}; }
  static GgufValue f32(float v) { return {GgufValueType::Float32, double{v}}; }
  static GgufValue f64(double v) { return {GgufValueType::Float64, v}; }
  static GgufValue boolean(bool v) { return {GgufValueType::Bool, v}; }
  static GgufValue string(std::string v) { return {GgufValueType::String, std::move(v)}; }
  static GgufValue array(GgufValueType element_type, std::vector<GgufValue> items);

  bool is_integer() const;
  bool is_float() const { return type == GgufValueType::Float32 || type == GgufValueType::Float64; }
  // Typed views; nullopt when the value does not have that shape (or does not fit).
  std::optional<int64_t> as_int() const;
  std::optional<uint64_t> as_uint() const;
  std::optional<double> as_float() const;  // also accepts integers
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const GgufArray* as_array() const;

  // A short human rendering: numbers, quoted strings, arrays abbreviated past `max_items`.
  std::string to_display(size_t max_items = 8) const;
};

// Metadata in file order, with lookup by key.
class GgufMetadata {
 public:
  // False when the key already exists.
  bool add(std::string key, GgufValue value);
  const GgufValue* find(std::string_view key) const;
  const std::vector<std::pair<std::string, GgufValue>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, GgufValue>> entries_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace tern
