// store_kv: the new keys and values k, v [n, kv_heads, head_dim] (F32) converted to the cache
// type (F32, F16, BF16, or Q8_0 blocks of 32 rounded as the CPU quantizer does) and written at
// rows slots[t] * kv_heads + h of the paged caches. One warp per (token, head, K or V) row.
// Reads 4 bytes per element, writes the cache type's size.
// Measured: latency-bound, ~0.1% of the copy bandwidth (~4.3 us a layer for 8 KB in and 4 KB out,
// F16; H200, cold profile of a Qwen3-8B decode step). With fusion on and an F16 cache, norm.cu's
// q/k norm + RoPE launch does this store too; this kernel serves the other cache types and the
// unfused paths.
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_device.cuh"

namespace tern::cuda {
namespace {

template <TensorType T>
__global__ void store_kv_kernel(uint8_t* k_cache, uint8_t* v_cache, const float* k, const float* v,
                                const int32_t* slots, int64_t rows, int64_t kv_heads,
                                int64_t head_dim, size_t row_bytes) {
  pdl_launch_dependents();
  pdl_wait();

  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (r >= 2 * rows) return;
  const bool is_v = r >= rows;
  const int64_t src_row = is_v ? r - rows : r;  // token * kv_heads + head
  const int64_t t = src_row / kv_heads, h = src_row % kv_heads;
  const float* src = (is_v ? v : k) + src_row * head_dim;
  uint8_t* dst = (is_v ? v_cache : k_cache) +
                 static_cast<size_t>(static_cast<int64_t>(slots[t]) * kv_heads + h) * row_bytes;
  if constexpr (T == TensorType::Q8_0) {
    for (int64_t b = 0; b < head_dim / 32; ++b) {
      const float x = src[b * 32 + lane];
      float amax = fabsf(x);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      const float d = amax / 127.0f;
      const float id = d == 0.0f ? 0.0f : 1.0f / d;
      uint8_t* blk = dst + b * 34;
      blk[2 + lane] = static_cast<uint8_t>(static_cast<int8_t>(roundf(x * id)));
      if (lane == 0) *reinterpret_cast<uint16_t*>(blk) = __half_as_ushort(__float2half_rn(d));
    }
  } else {
    for (int64_t i = lane; i < head_dim; i += 32) {
      if constexpr (T == TensorType::F32) {
        reinterpret_cast<float*>(dst)[i] = src[i];
      } else if constexpr (T == TensorType::F16) {
        reinterpret_cast<uint16_t*>(dst)[i] = __half_as_ushort(__float2half_rn(src[i]));
      } else {
        reinterpret_cast<uint16_t*>(dst)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
      }
    }
  }
}

}  // namespace

cudaError_t store_kv(TensorType type, void* k_cache, void* v_cache, const float* k, const float* v,
                     const int32_t* slots, int64_t n, int64_t kv_heads, int64_t head_dim,
                     cudaStream_t stream) {
  const int64_t rows = n * kv_heads;
  if (rows == 0) return cudaSuccess;
  const auto& info = tensor_type_info(type);
  const size_t row_bytes = static_cast<size_t>(head_dim / info.block_elements) * info.block_bytes;
  const unsigned blocks = static_cast<unsigned>((2 * rows + 7) / 8);
  auto* kc = static_cast<uint8_t*>(k_cache);
  auto* vc = static_cast<uint8_t*>(v_cache);
  switch (type) {
    case TensorType::F32:
      (void)launch_pdl(store_kv_kernel<TensorType::F32>, blocks, 256, stream, kc, vc, k, v, slots,
                       rows, kv_heads, head_dim, row_bytes);
      break;
    case TensorType::F16:
      (void)launch_pdl(store_kv_kernel<TensorType::F16>, blocks, 256, stream, kc, vc, k, v, slots,
                       rows, kv_heads, head_dim, row_bytes);
      break;
    case TensorType::BF16:
      (void)launch_pdl(store_kv_kernel<TensorType::BF16>, blocks, 256, stream, kc, vc, k, v, slots,
                       rows, kv_heads, head_dim, row_bytes);
      break;
    case TensorType::Q8_0:
      (void)launch_pdl(store_kv_kernel<TensorType::Q8_0>, blocks, 256, stream, kc, vc, k, v, slots,
                       rows, kv_heads, head_dim, row_bytes);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tern::cuda
