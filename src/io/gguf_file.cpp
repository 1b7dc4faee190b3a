#include "io/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <regex>
#include <set>

namespace tern {
namespace {

constexpr uint32_t kMaxNesting = 8;
constexpr uint64_t kMaxNameLength = 65535;

// A bounds-checked little-endian cursor over the header bytes.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& label) : bytes_(bytes), label_(label) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  Result<T> read(std::string_view what) {
    if (remaining() < sizeof(T)) return truncated(what, sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  Result<std::string> read_string(std::string_view what, uint64_t max_length) {
    uint64_t at = pos_;
    auto length = read<uint64_t>(what);
    if (!length) return length.error();
    if (*length > max_length) {
      return error_at(at, "{} has length {} (limit {})", what, *length, max_length);
    }
    if (*length > remaining()) {
      return error_at(at, "{} has length {} but only {} bytes remain in the file", what, *length,
                      remaining());
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), *length);
    pos_ += *length;
    return s;
  }

  template <typename... Args>
  Error error_at(uint64_t at, fmt::format_string<Args...> format, Args&&... args) const {
    return Error{fmt::format("{}: offset {}: {}", label_, at,
                             fmt::format(format, std::forward<Args>(args)...))};
  }

  Error truncated(std::string_view what, uint64_t need) const {
    return error_at(pos_, "file is truncated: {} needs {} bytes, {} remain", what, need,
                    remaining());
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& label_;
  uint64_t pos_ = 0;
};

// The smallest encoding of one element of `type`, to bound array counts by the bytes left.
uint64_t min_encoded_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::UInt8:
    case GgufValueType::Int8:
    case GgufValueType::Bool:
      return 1;
    case GgufValueType::UInt16:
    case GgufValueType::Int16:
      return 2;
    case GgufValueType::UInt32:
    case GgufValueType::Int32:
    case GgufValueType::Float32:
      return 4;
    case GgufValueType::UInt64:
    case GgufValueType::Int64:
    case GgufValueType::Float64:
    case GgufValueType::String:
      return 8;
    case GgufValueType::Array:
      return 12;
  }
  return 1;
}

Result<GgufValue> read_value(Cursor& in, GgufValueType type, const std::string& key,
                             uint32_t depth);

Result<GgufValue> read_array(Cursor& in, const std::string& key, uint32_t depth) {
  uint64_t at = in.offset();
  if (depth >= kMaxNesting) {
    return in.error_at(at, "key '{}': arrays nested deeper than {}", key, kMaxNesting);
  }
  auto raw_type = in.read<uint32_t>("array element type");
  if (!raw_type) return raw_type.error();
  if (!is_known_gguf_value_type(*raw_type)) {
    return in.error_at(at, "key '{}': unknown array element type {}", key, *raw_type);
  }
  auto element_type = static_cast<GgufValueType>(*raw_type);
  auto count = in.read<uint64_t>("array length");
  if (!count) return count.error();
  if (*count > in.remaining() / min_encoded_size(element_type)) {
    return in.error_at(at, "key '{}': array of {} {} elements cannot fit in the {} bytes left", key,
                       *count, gguf_value_type_name(element_type), in.remaining());
  }
  std::vector<GgufValue> items;
  items.reserve(*count);
  for (uint64_t i = 0; i < *count; ++i) {
    auto item = read_value(in, element_type, key, depth + 1);
    if (!item) return item.error();
    items.push_back(std::move(*item));
  }
  return GgufValue::array(element_type, std::move(items));
}

Result<GgufValue> read_value(Cursor& in, GgufValueType type, const std::string& key,
                             uint32_t depth) {
  auto wrap = [](auto r, auto make) -> Result<GgufValue> {
    if (!r) return r.error();
    return make(*r);
  };
  switch (type) {
    case GgufValueType::UInt8:
      return wrap(in.read<uint8_t>("u8"), GgufValue::u8);
    case GgufValueType::Int8:
      return wrap(in.read<int8_t>("i8"), GgufValue::i8);
    case GgufValueType::UInt16:
      return wrap(in.read<uint16_t>("u16"), GgufValue::u16);
    case GgufValueType::Int16:
      return wrap(in.read<int16_t>("i16"), GgufValue::i16);
    case GgufValueType::UInt32:
      return wrap(in.read<uint32_t>("u32"), GgufValue::u32);
    case GgufValueType::Int32:
      return wrap(in.read<int32_t>("i32"), GgufValue::i32);
    case GgufValueType::UInt64:
      return wrap(in.read<uint64_t>("u64"), GgufValue::u64);
    case GgufValueType::Int64:
      return wrap(in.read<int64_t>("i64"), GgufValue::i64);
    case GgufValueType::Float32:
      return wrap(in.read<float>("f32"), GgufValue::f32);
    case GgufValueType::Float64:
      return wrap(in.read<double>("f64"), GgufValue::f64);
    case GgufValueType::Bool: {
      uint64_t at = in.offset();
      auto b = in.read<uint8_t>("bool");
      if (!b) return b.error();
      if (*b > 1) return in.error_at(at, "key '{}': bool value {} is neither 0 nor 1", key, *b);
      return GgufValue::boolean(*b == 1);
    }
    case GgufValueType::String: {
      auto s = in.read_string("string value", UINT64_MAX);
      if (!s) return s.error();
      return GgufValue::string(std::move(*s));
    }
    case GgufValueType::Array:
      return read_array(in, key, depth);
  }
  return in.error_at(in.offset(), "key '{}': unknown value type", key);
}

uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

struct ParsedPart {
  uint32_t version = 0;
  uint32_t alignment = kGgufDefaultAlignment;
  GgufMetadata metadata;
  std::vector<GgufTensor> tensors;
};

Result<ParsedPart> parse_part(std::span<const uint8_t> bytes, const std::string& label) {
  Cursor in(bytes, label);
  ParsedPart part;
  auto magic = in.read<uint32_t>("magic");
  if (!magic) return magic.error();
  if (std::memcmp(bytes.data(), "GGUF", 4) != 0) {
    return in.error_at(
        0, "not a GGUF file (magic bytes {:02x} {:02x} {:02x} {:02x}, expected \"GGUF\")", bytes[0],
        bytes[1], bytes[2], bytes[3]);
  }
  auto version = in.read<uint32_t>("version");
  if (!version) return version.error();
  if (*version == 0x02000000u || *version == 0x03000000u) {
    return in.error_at(4, "big-endian GGUF files are not supported");
  }
  if (*version != 2 && *version != 3) {
    return in.error_at(4, "unsupported GGUF version {} (supported: 2, 3)", *version);
  }
  part.version = *version;
  auto tensor_count = in.read<uint64_t>("tensor count");
  if (!tensor_count) return tensor_count.error();
  auto kv_count = in.read<uint64_t>("metadata count");
  if (!kv_count) return kv_count.error();
  // A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
  // 8 + 4 + 8 + 4 + 8.
  if (*kv_count > in.remaining() / 13) {
    return in.error_at(16, "metadata count {} cannot fit in a file of {} bytes", *kv_count,
                       bytes.size());
  }
  if (*tensor_count > in.remaining() / 32) {
    return in.error_at(8, "tensor count {} cannot fit in a file of {} bytes", *tensor_count,
                       bytes.size());
  }

  for (uint64_t i = 0; i < *kv_count; ++i) {
    uint64_t at = in.offset();
    auto key = in.read_string("metadata key", kMaxNameLength);
    if (!key) return key.error();
    auto raw_type = in.read<uint32_t>("metadata value type");
    if (!raw_type) return raw_type.error();
    if (!is_known_gguf_value_type(*raw_type)) {
      return in.error_at(at, "key '{}' has unknown value type {}", *key, *raw_type);
    }
    auto value = read_value(in, static_cast<GgufValueType>(*raw_type), *key, 0);
    if (!value) return value.error();
    if (!part.metadata.add(*key, std::move(*value))) {
      return in.error_at(at, "duplicate metadata key '{}'", *key);
    }
  }

  if (const GgufValue* align = part.metadata.find("general.alignment")) {
    auto a = align->as_uint();
    if (align->type != GgufValueType::UInt32 || !a || *a == 0 || (*a & (*a - 1)) != 0) {
      return in.error_at(0, "general.alignment must be a power-of-two u32, got {} ({})",
                         align->to_display(), gguf_value_type_name(align->type));
    }
    part.alignment = static_cast<uint32_t>(*a);
  }

  std::set<std::string, std::less<>> names;
  part.tensors.reserve(*tensor_count);
  for (uint64_t i = 0; i < *tensor_count; ++i) {
    uint64_t at = in.offset();
    GgufTensor t;
    auto name = in.read_string("tensor name", kMaxNameLength);
    if (!name) return name.error();
    t.name = std::move(*name);
    if (!names.insert(t.name).second) return in.error_at(at, "duplicate tensor name '{}'", t.name);
    auto n_dims = in.read<uint32_t>("tensor dimension count");
    if (!n_dims) return n_dims.error();
    if (*n_dims == 0 || *n_dims > kGgufMaxDims) {
      return in.error_at(at, "tensor '{}' has {} dimensions (1 to {} allowed)", t.name, *n_dims,
                         kGgufMaxDims);
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto dim = in.read<uint64_t>("tensor dimension");
      if (!dim) return dim.error();
      if (*dim == 0 || *dim > (uint64_t{1} << 48) || elements > UINT64_MAX / *dim) {
        return in.error_at(at, "tensor '{}' has an absurd dimension {}", t.name, *dim);
      }
      elements *= *dim;
      t.shape.push_back(*dim);
    }
    auto raw_type = in.read<uint32_t>("tensor type");
    if (!raw_type) return raw_type.error();
    auto info = tensor_type_info(*raw_type);
    if (!info) return in.error_at(at, "tensor '{}' has unknown type id {}", t.name, *raw_type);
    t.type = info->type;
    if (t.shape[0] % info->block_elements != 0) {
      return in.error_at(at, "tensor '{}': row length {} is not a multiple of the {} block size {}",
                         t.name, t.shape[0], info->name, info->block_elements);
    }
    auto size = tensor_bytes(t.type, elements);
    if (!size || *size > (uint64_t{1} << 50)) {
      return in.error_at(at, "tensor '{}' is too large ({} elements)", t.name, elements);
    }
    t.size_bytes = *size;
    auto offset = in.read<uint64_t>("tensor offset");
    if (!offset) return offset.error();
    if (*offset % part.alignment != 0) {
      return in.error_at(at, "tensor '{}' offset {} is not a multiple of the alignment {}", t.name,
                         *offset, part.alignment);
    }
    t.offset = *offset;
    part.tensors.push_back(std::move(t));
  }

  uint64_t data_start = align_up(in.offset(), part.alignment);
  uint64_t data_size = bytes.size() > data_start ? bytes.size() - data_start : 0;
  // Data must lie inside the file and no two tensors may share bytes.
  std::vector<const GgufTensor*> by_offset;
  for (auto& t : part.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 0; i < by_offset.size(); ++i) {
    const GgufTensor& t = *by_offset[i];
    if (t.offset > data_size || t.size_bytes > data_size - t.offset) {
      return in.error_at(data_start + t.offset,
                         "tensor '{}' data [{}, {}) lies outside the file's data section ({} bytes;"
                         " file truncated?)",
                         t.name, data_start + t.offset, data_start + t.offset + t.size_bytes,
                         data_size);
    }
    if (i + 1 < by_offset.size() && t.offset + t.size_bytes > by_offset[i + 1]->offset) {
      return in.error_at(data_start + t.offset, "tensors '{}' and '{}' overlap", t.name,
                         by_offset[i + 1]->name);
    }
  }
  for (auto& t : part.tensors) t.data = bytes.data() + data_start + t.offset;
  return part;
}

}  // namespace

uint64_t GgufTensor::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

uint64_t GgufTensor::rows() const {
  return shape.empty() ? 0 : elements() / shape[0];
}

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, const std::string& label) {
  auto part = parse_part(bytes, label);
  if (!part) return part.error();
  GgufFile file;
  file.version_ = part->version;
  file.alignment_ = part->alignment;
  file.metadata_ = std::move(part->metadata);
  file.tensors_ = std::move(part->tensors);
  file.paths_ = {label};
  file.total_bytes_ = bytes.size();
  return file;
}

GgufFile GgufFile::from_parts(uint32_t version, GgufMetadata metadata,
                              std::vector<GgufTensor> tensors, std::vector<std::string> paths,
                              std::vector<std::shared_ptr<MappedFile>> maps,
                              std::vector<std::vector<uint8_t>> owned) {
  GgufFile file;
  file.version_ = version;
  file.metadata_ = std::move(metadata);
  file.tensors_ = std::move(tensors);
  file.paths_ = std::move(paths);
  for (const auto& map : maps) file.total_bytes_ += map->size();
  for (const auto& buffer : owned) file.total_bytes_ += buffer.size();
  file.maps_ = std::move(maps);
  file.owned_ = std::make_shared<const std::vector<std::vector<uint8_t>>>(std::move(owned));
  return file;
}

std::optional<SplitName> parse_split_name(const std::string& path) {
  static const std::regex kPattern(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  std::smatch m;
  if (!std::regex_match(path, m, kPattern)) return std::nullopt;
  SplitName name{m[1].str(), static_cast<uint32_t>(std::stoul(m[2].str())),
                 static_cast<uint32_t>(std::stoul(m[3].str()))};
  if (name.index == 0 || name.count == 0 || name.index > name.count) return std::nullopt;
  return name;
}

std::string split_file_name(const std::string& prefix, uint32_t index, uint32_t count) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, index, count);
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  auto split = parse_split_name(path);
  uint32_t count = split ? split->count : 1;
  GgufFile file;
  std::set<std::string, std::less<>> names;
  for (uint32_t i = 1; i <= count; ++i) {
    std::string part_path = split ? split_file_name(split->prefix, i, count) : path;
    auto mapped = MappedFile::open(part_path);
    if (!mapped) return mapped.error();
    auto map = std::make_shared<MappedFile>(std::move(*mapped));
    auto part = parse_part(map->bytes(), part_path);
    if (!part) return part.error();
    if (i == 1) {
      file.version_ = part->version;
      file.alignment_ = part->alignment;
      file.metadata_ = std::move(part->metadata);
    }
    if (split) {
      const GgufMetadata& md = i == 1 ? file.metadata_ : part->metadata;
      const GgufValue* no = md.find("split.no");
      const GgufValue* n = md.find("split.count");
      if (no == nullptr || n == nullptr || no->as_uint() != i - 1 || n->as_uint() != count) {
        return make_error("{}: split metadata (split.no / split.count) does not say part {} of {}",
                          part_path, i, count);
      }
    }
    for (auto& t : part->tensors) {
      if (!names.insert(t.name).second) {
        return make_error("{}: tensor '{}' also appears in an earlier part", part_path, t.name);
      }
      t.split_index = i - 1;
      file.tensors_.push_back(std::move(t));
    }
    file.total_bytes_ += map->size();
    file.paths_.push_back(part_path);
    file.maps_.push_back(std::move(map));
  }
  if (split) {
    const GgufValue* total = file.metadata_.find("split.tensors.count");
    if (total != nullptr && total->as_uint() != file.tensors_.size()) {
      return make_error("{}: split.tensors.count says {} tensors but the {} parts hold {}", path,
                        total->to_display(), count, file.tensors_.size());
    }
  }
  return file;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

uint64_t GgufFile::tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.size_bytes;
  return n;
}

}  // namespace tern
