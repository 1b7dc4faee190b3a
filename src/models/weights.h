// Looks up a model's tensors by their GGUF names and makes them usable on the device: in place
// when the device reads host memory, converted to F32 for small vectors (norms, biases).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/device/device.h"
#include "base/error.h"
#include "io/gguf_file.h"
#include "models/tensor_parallel.h"

namespace tern {

class WeightLoader {
 public:
  WeightLoader(const GgufFile& file, Device& device, const TensorParallel& tp = {})
      : file_(file), device_(device), tp_(tp) {}

  // The ranks this model is split over (one by default).
  const TensorParallel& tp() const { return tp_; }
  const GgufFile& file() const { return file_; }

  // A matrix used by matmul/get_rows, in its stored type. `rows`/`cols` are checked when > 0.
  Result<Tensor> matrix(const std::string& name, int64_t rows, int64_t cols);
  // A matrix used as matmul's W (and perhaps by get_rows, which reads any layout its device made):
  // the device may rearrange it (Device::prepare_matmul_weight).
  Result<Tensor> matmul_weight(const std::string& name, int64_t rows, int64_t cols);
  // Tensor parallelism: stored rows [part.begin, +count) of a [rows x cols] matrix, in place
  // (a column-parallel layer's share of its outputs; a share of a vocabulary).
  Result<Tensor> matrix_rows(const std::string& name, int64_t rows, int64_t cols, Slice part);
  Result<Tensor> matmul_weight_rows(const std::string& name, int64_t rows, int64_t cols,
                                    Slice part);
  // Columns [cols.begin, +count) of every row, copied (a row-parallel layer's share of its
  // inputs); both ends must fall on the type's block boundaries.
  Result<Tensor> matmul_weight_cols(const std::string& name, int64_t rows, int64_t cols,
                                    Slice part);
  // Expert `expert` (of `experts`) of layer `layer`'s `base` ("ffn_gate_exps"), a [rows x cols]
  // matmul weight: slice `expert` of the stacked blk.L.<base>.weight [experts, rows, cols] that
  // GGUF files hold, in place, or the separate blk.L.<base>.<expert>.weight of a Hugging Face
  // checkpoint (config/hf_model.h).
  Result<Tensor> expert_matmul_weight(int64_t layer, const char* base, int64_t expert,
                                      int64_t experts, int64_t rows, int64_t cols);
  // A vector converted to F32 (norm weights, biases); `length` checked. With `part`, only
  // elements [part.begin, +count) are kept.
  Result<Tensor> vector(const std::string& name, int64_t length, float add = 0.0f);
  Result<Tensor> vector_part(const std::string& name, int64_t length, Slice part);
  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }
  // "blk.<layer>.<suffix>"
  static std::string layer_name(int64_t layer, const char* suffix);

  // Buffers the loader created (F32 copies); the model keeps them alive.
  std::vector<DeviceBuffer>& owned() { return owned_; }

 private:
  Result<Tensor> place(const GgufTensor& t);
  Result<Tensor> place_bytes(const uint8_t* data, size_t bytes, const Tensor& shape);
  Result<Tensor> prepare(Tensor t);
  const GgufFile& file_;
  Device& device_;
  TensorParallel tp_;
  std::vector<DeviceBuffer> owned_;
};

// Typed reads of `<architecture>.<key>` metadata with clear errors.
class ArchKeys {
 public:
  ArchKeys(const GgufFile& file, std::string architecture)
      : file_(file), arch_(std::move(architecture)) {}
  Result<int64_t> integer(const std::string& key) const;
  int64_t integer_or(const std::string& key, int64_t fallback) const;
  Result<float> number(const std::string& key) const;
  float number_or(const std::string& key, float fallback) const;
  std::string string_or(const std::string& key, const std::string& fallback) const;

 private:
  const GgufValue* find(const std::string& key) const;
  const GgufFile& file_;
  std::string arch_;
};

}  // namespace tern
