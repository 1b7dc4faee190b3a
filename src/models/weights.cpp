#include "models/weights.h"

#include <fmt/format.h>

#include <cstring>

#include "backend/cpu/quant.h"

namespace tern {

std::string WeightLoader::layer_name(int64_t layer, const char* suffix) {
  return fmt::format("blk.{}.{}", layer, suffix);
}

Result<Tensor> WeightLoader::place(const GgufTensor& t) {
  Tensor shape;
  shape.type = t.type;
  for (size_t i = 0; i < t.shape.size(); ++i) shape.ne[i] = static_cast<int64_t>(t.shape[i]);
  return place_bytes(t.data, t.size_bytes, shape);
}

// In place when the device reads host memory (the mmap'd file), else a device copy.
Result<Tensor> WeightLoader::place_bytes(const uint8_t* data, size_t bytes, const Tensor& shape) {
  Tensor out = shape;
  if (device_.reads_host_memory()) {
    out.data = const_cast<uint8_t*>(data);
    return out;
  }
  auto buffer = device_.allocate(bytes);
  if (!buffer) return buffer.error();
  device_.upload(data, buffer->data(), bytes);
  out.data = buffer->data();
  owned_.push_back(std::move(*buffer));
  return out;
}

Result<Tensor> WeightLoader::prepare(Tensor t) {
  return device_.prepare_matmul_weight(t, owned_);
}

Result<Tensor> WeightLoader::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const GgufTensor* t = file_.find_tensor(name);
  if (t == nullptr) return make_error("{}: tensor '{}' is missing", file_.paths()[0], name);
  if (!cpu::is_supported(t->type)) {
    return make_error("tensor '{}' has type {}, which Tern cannot compute with yet", name,
                      tensor_type_name(t->type));
  }
  if (t->shape.size() != 2 || (cols > 0 && static_cast<int64_t>(t->shape[0]) != cols) ||
      (rows > 0 && static_cast<int64_t>(t->shape[1]) != rows)) {
    std::string shape =
        t->shape.size() == 2 ? fmt::format("{} x {}", t->shape[1], t->shape[0]) : "not 2-D";
    return make_error("tensor '{}' has shape {} (rows x cols), expected {} x {}", name, shape, rows,
                      cols);
  }
  return place(*t);
}

Result<Tensor> WeightLoader::matmul_weight(const std::string& name, int64_t rows, int64_t cols) {
  auto t = matrix(name, rows, cols);
  if (!t) return t;
  return prepare(*t);
}

Result<Tensor> WeightLoader::matrix_rows(const std::string& name, int64_t rows, int64_t cols,
                                         Slice part) {
  auto whole = matrix(name, rows, cols);
  if (!whole) return whole;
  if (part.begin < 0 || part.count <= 0 || part.begin + part.count > whole->rows()) {
    return make_error("tensor '{}': rows [{}, {}) are outside its {} rows", name, part.begin,
                      part.begin + part.count, whole->rows());
  }
  const GgufTensor& t = *file_.find_tensor(name);
  const size_t row_bytes = t.size_bytes / static_cast<size_t>(whole->rows());
  Tensor shape = *whole;
  shape.data = nullptr;
  shape.ne[1] = part.count;
  // A row-major matrix's rows are contiguous: the share is a window of the file.
  return place_bytes(t.data + static_cast<size_t>(part.begin) * row_bytes,
                     static_cast<size_t>(part.count) * row_bytes, shape);
}

Result<Tensor> WeightLoader::matmul_weight_rows(const std::string& name, int64_t rows, int64_t cols,
                                                Slice part) {
  auto placed = matrix_rows(name, rows, cols, part);
  if (!placed) return placed;
  return prepare(*placed);
}

Result<Tensor> WeightLoader::matmul_weight_cols(const std::string& name, int64_t rows, int64_t cols,
                                                Slice part) {
  auto whole = matrix(name, rows, cols);
  if (!whole) return whole;
  const int64_t n_cols = whole->ne[0], n_rows = whole->rows();
  if (part.begin < 0 || part.count <= 0 || part.begin + part.count > n_cols) {
    return make_error("tensor '{}': columns [{}, {}) are outside its {} columns", name, part.begin,
                      part.begin + part.count, n_cols);
  }
  const auto& info = tensor_type_info(whole->type);
  const int64_t block = info.block_elements;
  if (part.begin % block != 0 || part.count % block != 0) {
    return make_error(
        "tensor '{}' ({}) cannot be split at columns [{}, {}): {} stores blocks of {} values, so "
        "each rank's share of its {} columns must be a multiple of {}; use another --tp",
        name, tensor_type_name(whole->type), part.begin, part.begin + part.count,
        tensor_type_name(whole->type), block, n_cols, block);
  }
  const GgufTensor& t = *file_.find_tensor(name);
  const size_t row_bytes = t.size_bytes / static_cast<size_t>(n_rows);
  const size_t offset = static_cast<size_t>(part.begin / block) * info.block_bytes;
  const size_t share = static_cast<size_t>(part.count / block) * info.block_bytes;
  std::vector<uint8_t> host(share * static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    std::memcpy(host.data() + static_cast<size_t>(r) * share,
                t.data + static_cast<size_t>(r) * row_bytes + offset, share);
  }
  auto buffer = device_.allocate(host.size());
  if (!buffer) return buffer.error();
  device_.upload(host.data(), buffer->data(), host.size());
  Tensor copy = *whole;
  copy.data = buffer->data();
  copy.ne[0] = part.count;
  auto prepared = prepare(copy);
  if (!prepared) return prepared;
  // Keep the copy only when the device uses it as it is (it did not repack it elsewhere).
  if (prepared->data == copy.data) owned_.push_back(std::move(*buffer));
  return prepared;
}

Result<Tensor> WeightLoader::expert_matmul_weight(int64_t layer, const char* base, int64_t expert,
                                                  int64_t experts, int64_t rows, int64_t cols) {
  const std::string stacked = layer_name(layer, fmt::format("{}.weight", base).c_str());
  const GgufTensor* t = file_.find_tensor(stacked);
  if (t == nullptr) {
    return matmul_weight(layer_name(layer, fmt::format("{}.{}.weight", base, expert).c_str()), rows,
                         cols);
  }
  if (!cpu::is_supported(t->type)) {
    return make_error("tensor '{}' has type {}, which Tern cannot compute with yet", stacked,
                      tensor_type_name(t->type));
  }
  if (t->shape.size() != 3 || static_cast<int64_t>(t->shape[0]) != cols ||
      static_cast<int64_t>(t->shape[1]) != rows || static_cast<int64_t>(t->shape[2]) != experts) {
    std::string shape = t->shape.size() == 3
                            ? fmt::format("{} x {} x {}", t->shape[2], t->shape[1], t->shape[0])
                            : fmt::format("{}-D", t->shape.size());
    return make_error("tensor '{}' has shape {} (experts x rows x cols), expected {} x {} x {}",
                      stacked, shape, experts, rows, cols);
  }
  if (expert < 0 || expert >= experts) {
    return make_error("tensor '{}': expert {} is outside its {}", stacked, expert, experts);
  }
  // Each expert's matrix is a contiguous window of the stacked tensor.
  const size_t bytes = t->size_bytes / static_cast<size_t>(experts);
  Tensor shape;
  shape.type = t->type;
  shape.ne = {cols, rows, 1, 1};
  auto placed = place_bytes(t->data + static_cast<size_t>(expert) * bytes, bytes, shape);
  if (!placed) return placed;
  return prepare(*placed);
}

Result<Tensor> WeightLoader::vector(const std::string& name, int64_t length, float add) {
  const GgufTensor* t = file_.find_tensor(name);
  if (t == nullptr) return make_error("{}: tensor '{}' is missing", file_.paths()[0], name);
  if (static_cast<int64_t>(t->elements()) != length || !cpu::is_supported(t->type)) {
    return make_error("tensor '{}' has {} {} elements, expected {}", name, t->elements(),
                      tensor_type_name(t->type), length);
  }
  std::vector<float> values(static_cast<size_t>(length));
  cpu::dequantize_row(t->type, t->data, values.data(), length);
  if (add != 0.0f) {
    for (auto& v : values) v += add;
  }
  auto buffer = device_.allocate(values.size() * sizeof(float));
  if (!buffer) return buffer.error();
  device_.upload(values.data(), buffer->data(), values.size() * sizeof(float));
  Tensor out;
  out.data = buffer->data();
  out.type = TensorType::F32;
  out.ne = {length, 1, 1, 1};
  owned_.push_back(std::move(*buffer));
  return out;
}

Result<Tensor> WeightLoader::vector_part(const std::string& name, int64_t length, Slice part) {
  const GgufTensor* t = file_.find_tensor(name);
  if (t == nullptr) return make_error("{}: tensor '{}' is missing", file_.paths()[0], name);
  if (static_cast<int64_t>(t->elements()) != length || !cpu::is_supported(t->type)) {
    return make_error("tensor '{}' has {} {} elements, expected {}", name, t->elements(),
                      tensor_type_name(t->type), length);
  }
  if (part.begin < 0 || part.count <= 0 || part.begin + part.count > length) {
    return make_error("tensor '{}': elements [{}, {}) are outside its {}", name, part.begin,
                      part.begin + part.count, length);
  }
  std::vector<float> values(static_cast<size_t>(length));
  cpu::dequantize_row(t->type, t->data, values.data(), length);
  auto buffer = device_.allocate(static_cast<size_t>(part.count) * sizeof(float));
  if (!buffer) return buffer.error();
  device_.upload(values.data() + part.begin, buffer->data(),
                 static_cast<size_t>(part.count) * sizeof(float));
  Tensor out;
  out.data = buffer->data();
  out.type = TensorType::F32;
  out.ne = {part.count, 1, 1, 1};
  owned_.push_back(std::move(*buffer));
  return out;
}

const GgufValue* ArchKeys::find(const std::string& key) const {
  return file_.metadata().find(arch_ + "." + key);
}

Result<int64_t> ArchKeys::integer(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return make_error("{}: {}.{} is missing", file_.paths()[0], arch_, key);
  if (const GgufArray* arr = v->as_array(); arr && !arr->items.empty()) {
    // Per-layer arrays (e.g. head_count_kv): all entries must agree for the models Tern runs.
    auto first = arr->items[0].as_int();
    for (const auto& item : arr->items) {
      if (item.as_int() != first)
        return make_error("{}.{}: per-layer values differ; not supported", arch_, key);
    }
    if (first) return *first;
  }
  auto i = v->as_int();
  if (!i)
    return make_error("{}: {}.{} must be an integer, got {}", file_.paths()[0], arch_, key,
                      v->to_display());
  return *i;
}

int64_t ArchKeys::integer_or(const std::string& key, int64_t fallback) const {
  if (find(key) == nullptr) return fallback;
  auto i = integer(key);
  return i ? *i : fallback;
}

Result<float> ArchKeys::number(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return make_error("{}: {}.{} is missing", file_.paths()[0], arch_, key);
  auto f = v->as_float();
  if (!f)
    return make_error("{}: {}.{} must be a number, got {}", file_.paths()[0], arch_, key,
                      v->to_display());
  return static_cast<float>(*f);
}

float ArchKeys::number_or(const std::string& key, float fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr || !v->as_float()) return fallback;
  return static_cast<float>(*v->as_float());
}

std::string ArchKeys::string_or(const std::string& key, const std::string& fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->as_string() == nullptr) return fallback;
  return *v->as_string();
}

}  // namespace tern
