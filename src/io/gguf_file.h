// A GGUF model file (v2 or v3), memory-mapped and validated; split files open as one.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, the
// key/value pairs, the tensor infos (name, n_dims, dims, type, offset), padding to
// `general.alignment` (default 32), then the tensor data section. Every count and length is
// checked against the bytes that remain, so a corrupt file can neither crash the reader nor
// make it allocate more than the file's size.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/tensor_type.h"
#include "io/gguf_value.h"

namespace tern {

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufMaxDims = 4;

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> shape;  // ne[0] (contiguous, row length) first, as GGUF stores it
  TensorType type = TensorType::F32;
  uint64_t offset = 0;  // from the start of its file's data section
  uint64_t size_bytes = 0;
  uint32_t split_index = 0;  // which file of a split model holds it
  const uint8_t* data = nullptr;

  uint64_t elements() const;
  uint64_t rows() const;  // product of every dim but the first
  std::span<const uint8_t> bytes() const { return {data, size_bytes}; }
};

class GgufFile {
 public:
  // Opens and validates a file. A name like `model-00001-of-00003.gguf` opens every part.
  static Result<GgufFile> open(const std::string& path);
  // Parses bytes already in memory (used by the fuzzer and tests); `label` names them in errors.
  // The bytes must outlive the returned file.
  static Result<GgufFile> parse(std::span<const uint8_t> bytes, const std::string& label);
  // Assembles a file from parts built elsewhere (e.g. a Hugging Face safetensors directory):
  // tensors whose data points into `maps` (kept alive here) or into `owned` buffers (moved in;
  // shared between copies, so their addresses never change). The caller has validated them.
  static GgufFile from_parts(uint32_t version, GgufMetadata metadata,
                             std::vector<GgufTensor> tensors, std::vector<std::string> paths,
                             std::vector<std::shared_ptr<MappedFile>> maps,
                             std::vector<std::vector<uint8_t>> owned);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const GgufMetadata& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  const std::vector<std::string>& paths() const { return paths_; }
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t tensor_bytes() const;

 private:
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  GgufMetadata metadata_;
  std::vector<GgufTensor> tensors_;
  std::vector<std::string> paths_;
  uint64_t total_bytes_ = 0;
  std::vector<std::shared_ptr<MappedFile>> maps_;
  std::shared_ptr<const std::vector<std::vector<uint8_t>>> owned_;  // from_parts only
};

// "model-00002-of-00005.gguf" -> {prefix "model", index 2, count 5}; nullopt if not a split name.
struct SplitName {
  std::string prefix;
  uint32_t index;
  uint32_t count;
};
std::optional<SplitName> parse_split_name(const std::string& path);
std::string split_file_name(const std::string& prefix, uint32_t index, uint32_t count);

}  // namespace tern
