// A Hugging Face safetensors file, memory-mapped and validated.
//
// Layout: u64 little-endian header length N, N bytes of JSON header, then the data area. The
// header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets from
// the start of the data area) and may hold "__metadata__" (string -> string). Every offset, shape
// and size is checked against the file, and tensors may not overlap, so a corrupt file can
// neither crash the reader nor point outside the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/tensor_type.h"

namespace tern {

inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;  // as the reference reader

struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // "F32", "BF16", "I64", ... as the header spells it
  uint32_t element_size = 0;    // bytes per element
  std::vector<uint64_t> shape;  // outermost first (PyTorch order); empty for a scalar
  uint64_t offset = 0;          // from the start of the file
  uint64_t size_bytes = 0;
  const uint8_t* data = nullptr;

  uint64_t elements() const;
  std::span<const uint8_t> bytes() const { return {data, size_bytes}; }
};

// The GGUF type of a floating-point dtype Tern computes with (F32, F16, BF16), else nullopt.
std::optional<TensorType> safetensors_gguf_type(std::string_view dtype);

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);
  // Parses bytes already in memory (tests); `label` names them in errors. The bytes must
  // outlive the returned file.
  static Result<SafetensorsFile> parse(std::span<const uint8_t> bytes, const std::string& label);

  const std::string& path() const { return path_; }
  // Tensors in the order of their data offsets.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The mapping the tensors point into (null for parse()).
  const std::shared_ptr<MappedFile>& mapping() const { return map_; }

 private:
  std::string path_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<MappedFile> map_;
};

}  // namespace tern
