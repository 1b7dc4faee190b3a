#include "io/gguf_writer.h"

#include <cstring>
#include <set>

#include "base/mapped_file.h"

namespace tern {
namespace {

uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

class ByteSink {
 public:
  template <typename T>
  void put(T value) {
    size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &value, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    size_t at = bytes.size();
    bytes.resize(at + s.size());
    if (!s.empty()) std::memcpy(bytes.data() + at, s.data(), s.size());
  }
  void put_value(const GgufValue& v) {
    switch (v.type) {
      case GgufValueType::UInt8:
        put<uint8_t>(static_cast<uint8_t>(*v.as_uint()));
        break;
      case GgufValueType::Int8:
        put<int8_t>(static_cast<int8_t>(*v.as_int()));
        break;
      case GgufValueType::UInt16:
        put<uint16_t>(static_cast<uint16_t>(*v.as_uint()));
        break;
      case GgufValueType::Int16:
        put<int16_t>(static_cast<int16_t>(*v.as_int()));
        break;
      case GgufValueType::UInt32:
        put<uint32_t>(static_cast<uint32_t>(*v.as_uint()));
        break;
      case GgufValueType::Int32:
        put<int32_t>(static_cast<int32_t>(*v.as_int()));
        break;
      case GgufValueType::UInt64:
        put<uint64_t>(std::get<uint64_t>(v.data));
        break;
      case GgufValueType::Int64:
        put<int64_t>(std::get<int64_t>(v.data));
        break;
      case GgufValueType::Float32:
        put<float>(static_cast<float>(std::get<double>(v.data)));
        break;
      case GgufValueType::Float64:
        put<double>(std::get<double>(v.data));
        break;
      case GgufValueType::Bool:
        put<uint8_t>(std::get<bool>(v.data) ? 1 : 0);
        break;
      case GgufValueType::String:
        put_string(std::get<std::string>(v.data));
        break;
      case GgufValueType::Array: {
        const GgufArray* arr = v.as_array();
        put<uint32_t>(static_cast<uint32_t>(arr->element_type));
        put<uint64_t>(arr->items.size());
        for (const auto& item : arr->items) put_value(item);
        break;
      }
    }
  }
  std::vector<uint8_t> bytes;
};

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint32_t alignment)
    : version_(version), alignment_(alignment) {
  if (alignment_ != kGgufDefaultAlignment) set("general.alignment", GgufValue::u32(alignment_));
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (metadata_.find(key) == nullptr) {
    metadata_.add(key, std::move(value));
    return;
  }
  GgufMetadata rebuilt;
  for (const auto& [k, v] : metadata_.entries()) rebuilt.add(k, k == key ? value : v);
  metadata_ = std::move(rebuilt);
}

Result<void> GgufWriter::add_tensor(std::string name, TensorType type, std::vector<uint64_t> shape,
                                    std::span<const uint8_t> data) {
  TensorFill copy = [data](std::span<uint8_t> out) -> Result<void> {
    std::memcpy(out.data(), data.data(), out.size());
    return {};
  };
  uint64_t elements = 1;
  for (uint64_t d : shape) elements *= d;
  auto size = tensor_bytes(type, elements);
  if (size && *size != data.size()) {
    return make_error("tensor '{}': {} bytes given, {} {} elements need {}", name, data.size(),
                      elements, tensor_type_name(type), *size);
  }
  return add_tensor(std::move(name), type, std::move(shape), std::move(copy));
}

Result<void> GgufWriter::add_tensor(std::string name, TensorType type, std::vector<uint64_t> shape,
                                    TensorFill fill) {
  if (shape.empty() || shape.size() > kGgufMaxDims) {
    return make_error("tensor '{}': {} dimensions (1 to {} allowed)", name, shape.size(),
                      kGgufMaxDims);
  }
  for (const auto& t : tensors_) {
    if (t.name == name) return make_error("tensor '{}' added twice", name);
  }
  uint64_t elements = 1;
  for (uint64_t d : shape) elements *= d;
  const auto& info = tensor_type_info(type);
  auto size = tensor_bytes(type, elements);
  if (shape[0] % info.block_elements != 0 || !size) {
    return make_error("tensor '{}': row length {} is not a multiple of the {} block size {}", name,
                      shape[0], info.name, info.block_elements);
  }
  tensors_.push_back({std::move(name), type, std::move(shape), *size, std::move(fill)});
  return {};
}

std::vector<uint8_t> GgufWriter::header_bytes(const Part& part) const {
  ByteSink out;
  out.put<uint32_t>(0x46554747u);  // "GGUF" little-endian
  out.put<uint32_t>(version_);
  out.put<uint64_t>(part.tensors.size());
  out.put<uint64_t>(part.metadata.size());
  for (const auto& [key, value] : part.metadata.entries()) {
    out.put_string(key);
    out.put<uint32_t>(static_cast<uint32_t>(value.type));
    out.put_value(value);
  }
  uint64_t offset = 0;
  for (const PendingTensor* t : part.tensors) {
    out.put_string(t->name);
    out.put<uint32_t>(static_cast<uint32_t>(t->shape.size()));
    for (uint64_t d : t->shape) out.put<uint64_t>(d);
    out.put<uint32_t>(static_cast<uint32_t>(t->type));
    out.put<uint64_t>(offset);
    offset = align_up(offset + t->size_bytes, alignment_);
  }
  out.bytes.resize(align_up(out.bytes.size(), alignment_), 0);
  return std::move(out.bytes);
}

Result<void> GgufWriter::write_part(const std::string& path, const Part& part, uint64_t& done,
                                    uint64_t total, const Progress& progress) const {
  auto file = AtomicFileWriter::create(path);
  if (!file) return file.error();
  TERN_TRY(file->write(header_bytes(part)));
  std::vector<uint8_t> buffer;
  for (const PendingTensor* t : part.tensors) {
    buffer.resize(t->size_bytes);
    auto filled = t->fill(buffer);
    if (!filled) return make_error("tensor '{}': {}", t->name, filled.error().message);
    TERN_TRY(file->write(buffer));
    TERN_TRY(file->write_zeros(align_up(t->size_bytes, alignment_) - t->size_bytes));
    done += t->size_bytes;
    if (progress) progress(done, total);
  }
  return file->commit();
}

Result<void> GgufWriter::write(const std::string& path, const Progress& progress) const {
  Part part{metadata_, {}};
  uint64_t total = 0;
  for (const auto& t : tensors_) {
    part.tensors.push_back(&t);
    total += t.size_bytes;
  }
  uint64_t done = 0;
  return write_part(path, part, done, total, progress);
}

Result<std::vector<std::string>> GgufWriter::write_split(const std::string& prefix,
                                                         size_t tensors_per_part,
                                                         const Progress& progress) const {
  if (tensors_per_part == 0) return make_error("tensors per split part must be at least 1");
  size_t count = std::max<size_t>(1, (tensors_.size() + tensors_per_part - 1) / tensors_per_part);
  if (count > 99999) return make_error("{} split parts are too many", count);
  uint64_t total = 0;
  for (const auto& t : tensors_) total += t.size_bytes;
  uint64_t done = 0;
  std::vector<std::string> paths;
  for (size_t i = 0; i < count; ++i) {
    Part part;
    if (i == 0)
      part.metadata = metadata_;
    else if (alignment_ != kGgufDefaultAlignment)
      part.metadata.add("general.alignment", GgufValue::u32(alignment_));
    part.metadata.add("split.no", GgufValue::u16(static_cast<uint16_t>(i)));
    part.metadata.add("split.count", GgufValue::u16(static_cast<uint16_t>(count)));
    part.metadata.add("split.tensors.count", GgufValue::i32(static_cast<int32_t>(tensors_.size())));
    for (size_t j = i * tensors_per_part; j < std::min(tensors_.size(), (i + 1) * tensors_per_part);
         ++j) {
      part.tensors.push_back(&tensors_[j]);
    }
    std::string path =
        split_file_name(prefix, static_cast<uint32_t>(i + 1), static_cast<uint32_t>(count));
    TERN_TRY(write_part(path, part, done, total, progress));
    paths.push_back(path);
  }
  return paths;
}

Result<std::vector<uint8_t>> GgufWriter::to_bytes() const {
  Part part{metadata_, {}};
  for (const auto& t : tensors_) part.tensors.push_back(&t);
  std::vector<uint8_t> bytes = header_bytes(part);
  for (const PendingTensor* t : part.tensors) {
    size_t at = bytes.size();
    bytes.resize(at + align_up(t->size_bytes, alignment_), 0);
    auto filled = t->fill({bytes.data() + at, t->size_bytes});
    if (!filled) return filled.error();
  }
  return bytes;
}

}  // namespace tern
