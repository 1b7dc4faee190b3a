// AVX-512 dot kernels (placeholder: every type falls back to the AVX2/scalar kernels).
#include "backend/cpu/kernels.h"

namespace tern::cpu::detail {
DotFn dot_avx512(TensorType) {
  return nullptr;
}
}  // namespace tern::cpu::detail
