#include "engine/hf_import.h"

#include <vector>

#include "backend/cpu/quant.h"
#include "config/hf_model.h"
#include "io/gguf_file.h"

namespace tern {
namespace {

bool importable(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q8_0:
    case TensorType::Q4_0:
    case TensorType::Q4_K:
    case TensorType::Q6_K:
      return true;
    default:
      return false;
  }
}

}  // namespace

Result<void> write_gguf_from_hf(const std::string& dir, const std::string& out_path,
                                std::optional<TensorType> quant,
                                const GgufWriter::Progress& progress) {
  if (quant && (!importable(*quant) || !cpu::can_quantize(*quant))) {
    return make_error("cannot convert to {}: choose F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K",
                      tensor_type_name(*quant));
  }
  auto opened = open_hf_model(dir);
  if (!opened) return opened.error();
  // The writer fills tensors from the model's mappings at write time; keep them alive until then.
  auto model = std::make_shared<GgufFile>(std::move(*opened));
  GgufWriter writer;
  for (const auto& [key, value] : model->metadata().entries()) writer.set(key, value);

  for (const GgufTensor& t : model->tensors()) {
    TensorType target = t.type;
    if (t.shape.size() == 1) {
      target = TensorType::F32;
    } else if (quant) {
      target = *quant;
      if (t.shape[0] % tensor_type_info(target).block_elements != 0) target = TensorType::F16;
    }
    if (target == t.type) {
      TERN_TRY(writer.add_tensor(t.name, t.type, t.shape, t.bytes()));
      continue;
    }
    const GgufTensor* src = &t;
    const int64_t cols = static_cast<int64_t>(t.shape[0]);
    const uint64_t rows = t.rows();
    const uint64_t src_row_bytes = t.size_bytes / std::max<uint64_t>(rows, 1);
    auto fill = [model, src, target, cols, rows,
                 src_row_bytes](std::span<uint8_t> out) -> Result<void> {
      std::vector<float> row(static_cast<size_t>(cols));
      const uint64_t out_row_bytes = out.size() / std::max<uint64_t>(rows, 1);
      for (uint64_t r = 0; r < rows; ++r) {
        cpu::dequantize_row(src->type, src->data + r * src_row_bytes, row.data(), cols);
        size_t n = cpu::quantize_row(target, row.data(), out.data() + r * out_row_bytes, cols);
        if (n != out_row_bytes) {
          return make_error("tensor '{}': quantizing a row to {} gave {} bytes, expected {}",
                            src->name, tensor_type_name(target), n, out_row_bytes);
        }
      }
      return {};
    };
    TERN_TRY(writer.add_tensor(t.name, target, t.shape, fill));
  }
  return writer.write(out_path, progress);
}

}  // namespace tern
