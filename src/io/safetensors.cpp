#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

namespace tern {
namespace {

using json = nlohmann::json;

std::optional<uint32_t> dtype_size(std::string_view dtype) {
  static const std::map<std::string, uint32_t, std::less<>> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},
  };
  auto it = kSizes.find(dtype);
  if (it == kSizes.end()) return std::nullopt;
  return it->second;
}

// a * b, or nullopt on overflow.
std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return std::nullopt;
  return a * b;
}

}  // namespace

uint64_t SafetensorsTensor::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::optional<TensorType> safetensors_gguf_type(std::string_view dtype) {
  if (dtype == "F32") return TensorType::F32;
  if (dtype == "F16") return TensorType::F16;
  if (dtype == "BF16") return TensorType::BF16;
  return std::nullopt;
}

Result<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes,
                                               const std::string& label) {
  if (bytes.size() < 8) {
    return make_error("{}: offset 0: file is truncated: {} bytes, the header length needs 8", label,
                      bytes.size());
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[static_cast<size_t>(i)];
  if (header_len > kSafetensorsMaxHeader) {
    return make_error("{}: offset 0: header length {} exceeds the limit of {} bytes", label,
                      header_len, kSafetensorsMaxHeader);
  }
  if (header_len > bytes.size() - 8) {
    return make_error("{}: offset 0: header length {} but only {} bytes follow", label, header_len,
                      bytes.size() - 8);
  }
  if (header_len < 2 || bytes[8] != '{') {
    return make_error("{}: offset 8: the header is not a JSON object", label);
  }
  const auto* text = reinterpret_cast<const char*>(bytes.data() + 8);
  json header = json::parse(text, text + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return make_error("{}: offset 8: the {}-byte header is not valid JSON", label, header_len);
  }
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = bytes.size() - data_start;

  SafetensorsFile file;
  file.path_ = label;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return make_error("{}: __metadata__ must be an object", label);
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) {
          return make_error("{}: __metadata__ value of '{}' must be a string", label, m.key());
        }
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](std::string_view why) {
      return make_error("{}: tensor '{}': {}", label, name, why);
    };
    if (!entry.is_object()) return bad("header entry is not an object");
    auto dtype = entry.find("dtype");
    auto shape = entry.find("shape");
    auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string()) return bad("'dtype' is missing");
    if (shape == entry.end() || !shape->is_array()) return bad("'shape' is missing");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return bad("'data_offsets' must be two non-negative integers");
    }
    SafetensorsTensor t;
    t.name = name;
    t.dtype = dtype->get<std::string>();
    auto size = dtype_size(t.dtype);
    if (!size) return bad(fmt::format("unknown dtype '{}'", t.dtype));
    t.element_size = *size;
    uint64_t elements = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) return bad("'shape' must hold non-negative integers");
      t.shape.push_back(d.get<uint64_t>());
      auto n = checked_mul(elements, t.shape.back());
      if (!n) return bad("shape overflows");
      elements = *n;
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return make_error(
          "{}: tensor '{}': data_offsets [{}, {}] lie outside the {}-byte data area (file offset "
          "{})",
          label, name, begin, end, data_size, data_start);
    }
    auto expected = checked_mul(elements, t.element_size);
    if (!expected || *expected != end - begin) {
      return make_error(
          "{}: tensor '{}': {} {} elements need {} bytes but data_offsets [{}, {}] "
          "hold {} (file offset {})",
          label, name, elements, t.dtype, expected ? *expected : 0, begin, end, end - begin,
          data_start + begin);
    }
    t.offset = data_start + begin;
    t.size_bytes = end - begin;
    t.data = bytes.data() + t.offset;
    file.tensors_.push_back(std::move(t));
  }
  std::sort(file.tensors_.begin(), file.tensors_.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  for (size_t i = 0; i + 1 < file.tensors_.size(); ++i) {
    const auto& a = file.tensors_[i];
    const auto& b = file.tensors_[i + 1];
    if (a.offset + a.size_bytes > b.offset) {
      return make_error("{}: tensors '{}' and '{}' overlap at file offset {}", label, a.name,
                        b.name, b.offset);
    }
  }
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_[file.tensors_[i].name] = i;
  return file;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped) return mapped.error();
  auto map = std::make_shared<MappedFile>(std::move(*mapped));
  auto file = parse(map->bytes(), path);
  if (!file) return file.error();
  file->map_ = std::move(map);
  return file;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tern
