// Writes GGUF files (v2 or v3), whole or split into parts, always through a temp file + rename.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/tensor_type.h"
#include "io/gguf_file.h"
#include "io/gguf_value.h"

namespace tern {

class GgufWriter {
 public:
  // Fills a tensor's bytes at write time (so huge generated tensors never sit in memory twice).
  using TensorFill = std::function<Result<void>(std::span<uint8_t> out)>;
  // Called as bytes are written: (done, total).
  using Progress = std::function<void(uint64_t, uint64_t)>;

  explicit GgufWriter(uint32_t version = 3, uint32_t alignment = kGgufDefaultAlignment);

  // Adds a key, or replaces the value of an existing one in place.
  void set(const std::string& key, GgufValue value);
  const GgufMetadata& metadata() const { return metadata_; }

  // `data` must stay alive until write(); its size must match type and shape.
  Result<void> add_tensor(std::string name, TensorType type, std::vector<uint64_t> shape,
                          std::span<const uint8_t> data);
  Result<void> add_tensor(std::string name, TensorType type, std::vector<uint64_t> shape,
                          TensorFill fill);

  Result<void> write(const std::string& path, const Progress& progress = {}) const;
  // Writes `prefix-0000i-of-0000N.gguf` parts with at most `tensors_per_part` tensors each; the
  // first part carries all metadata, every part carries split.no / split.count /
  // split.tensors.count. Returns the part paths.
  Result<std::vector<std::string>> write_split(const std::string& prefix, size_t tensors_per_part,
                                               const Progress& progress = {}) const;
  // The whole file in memory (tests, fuzz seeds).
  Result<std::vector<uint8_t>> to_bytes() const;

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<uint64_t> shape;
    uint64_t size_bytes;
    TensorFill fill;
  };
  struct Part {
    GgufMetadata metadata;
    std::vector<const PendingTensor*> tensors;
  };
  std::vector<uint8_t> header_bytes(const Part& part) const;
  Result<void> write_part(const std::string& path, const Part& part, uint64_t& done, uint64_t total,
                          const Progress& progress) const;

  uint32_t version_;
  uint32_t alignment_;
  GgufMetadata metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace tern
