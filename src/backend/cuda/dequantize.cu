// dequantize: a whole weight matrix (any block type) to BF16, the input of the tensor-core GEMM
// of prefill. Reads rows * row_bytes, writes rows * cols * 2 bytes; one thread per 32-element
// chunk, stores of 16 bytes.
// Measured: Q4_K 12288x4096 dequantize + cuBLAS BF16 GEMM at n = 512 ran at 398 dense TFLOP/s
// against 703 for BF16 weights alone (H200, tern-cuda-bench); its own bandwidth fraction is not
// measured apart.
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_device.cuh"

namespace tern::cuda {
namespace {

template <TensorType T>
__global__ void dequantize_bf16_kernel(const uint8_t* w, int64_t rows, int64_t cols,
                                       size_t row_bytes, uint16_t* out) {
  const int64_t chunks_per_row = cols / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * chunks_per_row) return;
  const int64_t r = i / chunks_per_row, c = i % chunks_per_row;
  float y[32];
  dequant_chunk<T>(w + static_cast<size_t>(r) * row_bytes, c, y);
  uint4* o = reinterpret_cast<uint4*>(out + r * cols + c * 32);
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    uint32_t packed[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const __nv_bfloat162 two = __floats2bfloat162_rn(y[v * 8 + 2 * p], y[v * 8 + 2 * p + 1]);
      packed[p] = *reinterpret_cast<const uint32_t*>(&two);
    }
    o[v] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

}  // namespace

bool is_supported(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::IQ4_NL:
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

cudaError_t dequantize_bf16(TensorType type, const void* w, int64_t rows, int64_t cols,
                            uint16_t* out, cudaStream_t stream) {
  const auto& info = tensor_type_info(type);
  const size_t row_bytes = static_cast<size_t>(cols / info.block_elements) * info.block_bytes;
  const int64_t chunks = rows * (cols / 32);
  const unsigned blocks = static_cast<unsigned>((chunks + 127) / 128);
  const auto* p = static_cast<const uint8_t*>(w);
  const bool ok = dispatch_block_type(type, [&]<TensorType T>() {
    dequantize_bf16_kernel<T><<<blocks, 128, 0, stream>>>(p, rows, cols, row_bytes, out);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace tern::cuda
