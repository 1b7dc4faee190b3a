// AVX2 dot kernels (placeholder: every type falls back to the scalar kernels).
#include "backend/cpu/kernels.h"

namespace tern::cpu::detail {
DotFn dot_avx2(TensorType) {
  return nullptr;
}
}  // namespace tern::cpu::detail
