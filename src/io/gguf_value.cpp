#include "io/gguf_value.h"

#include <fmt/format.h>

#include <limits>

namespace tern {

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::UInt8:
      return "u8";
    case GgufValueType::Int8:
      return "i8";
    case GgufValueType::UInt16:
      return "u16";
    case GgufValueType::Int16:
      return "i16";
    case GgufValueType::UInt32:
      return "u32";
    case GgufValueType::Int32:
      return "i32";
    case GgufValueType::Float32:
      return "f32";
    case GgufValueType::Bool:
      return "bool";
    case GgufValueType::String:
      return "str";
    case GgufValueType::Array:
      return "arr";
    case GgufValueType::UInt64:
      return "u64";
    case GgufValueType::Int64:
      return "i64";
    case GgufValueType::Float64:
      return "f64";
  }
  return "?";
}

bool is_known_gguf_value_type(uint32_t raw) {
  return raw <= 12;
}

GgufValue GgufValue::array(GgufValueType element_type, std::vector<GgufValue> items) {
  auto arr = std::make_shared<GgufArray>();
  arr->element_type = element_type;
  arr->items = std::move(items);
  return {GgufValueType::Array, std::move(arr)};
}

bool GgufValue::is_integer() const {
  return std::holds_alternative<uint64_t>(data) || std::holds_alternative<int64_t>(data);
}

std::optional<int64_t> GgufValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&data)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  return std::nullopt;
}

std::optional<uint64_t> GgufValue::as_uint() const {
  if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&data)) {
    if (*i < 0) return std::nullopt;
    return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (const auto* d = std::get_if<double>(&data)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&data)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::as_string() const {
  return std::get_if<std::string>(&data);
}

const GgufArray* GgufValue::as_array() const {
  if (const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&data)) return a->get();
  return nullptr;
}

static std::string quote(const std::string& s, size_t max_chars) {
  std::string out = "\"";
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ >= max_chars) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string GgufValue::to_display(size_t max_items) const {
  if (const auto* u = std::get_if<uint64_t>(&data)) return std::to_string(*u);
  if (const auto* i = std::get_if<int64_t>(&data)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&data)) return fmt::format("{}", *d);
  if (const auto* b = std::get_if<bool>(&data)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&data)) return quote(*s, 120);
  const GgufArray* arr = as_array();
  std::string out =
      fmt::format("[{} x {}: ", arr->items.size(), gguf_value_type_name(arr->element_type));
  for (size_t i = 0; i < arr->items.size() && i < max_items; ++i) {
    if (i > 0) out += ", ";
    out += arr->items[i].to_display(max_items);
  }
  if (arr->items.size() > max_items) out += ", ...";
  return out + "]";
}

bool GgufMetadata::add(std::string key, GgufValue value) {
  if (index_.count(key) != 0) return false;
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
  return true;
}

const GgufValue* GgufMetadata::find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

}  // namespace tern
