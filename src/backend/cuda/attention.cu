// attention: the decode attention's dispatch, no kernel of its own (so no roofline figure): picks
// the kernel for a step (decode_attention_kernel), the fewest keys a context split takes and the
// blocks a multiprocessor gets (cuda_device_attention.cpp chooses the splits from them), runs it
// and merges the splits (attention_combine.cu). The kernels: attention_decode_any_cache.cu ("v2":
// any cache type), attention_decode_f16_bf16.cu ("v4": F16/BF16, heads of 64, 128 or 256),
// attention_decode_mma.cu (the tensor cores, F16). Prefill attention: attention_prefill*.cu.
#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernels.h"

namespace tern::cuda {

// The tensor-core kernel from this many keys on (the most a token of the batch sees): it wins
// after 8K-16K tokens and loses on Q8_0/BF16 files below 8K (H100 decode steps; bench/README.md).
constexpr int64_t kMmaFromKeys = 8192;

DecodeAttentionKernel decode_attention_kernel(TensorType kv_type, int64_t head_dim, int64_t group,
                                              int64_t max_keys) {
  static const int forced = [] {
    const char* v = std::getenv("TERN_CUDA_ATTN");
    if (v == nullptr) return 0;
    return std::strcmp(v, "mma") == 0 ? 5 : std::atoi(v);
  }();
  const bool v4 = (kv_type == TensorType::F16 || kv_type == TensorType::BF16) &&
                  (head_dim == 64 || head_dim == 128 || head_dim == 256);
  // Groups that v4 cuts into uneven blocks (3 query heads a KV head: blocks of 2 and 1) read the
  // keys twice with idle lanes; the tensor-core kernel takes up to 8 heads in one block (faster
  // for SmolLM2's group of 3 at every context measured: bench/README.md).
  const bool uneven = v4 && group % decode_attention_v4_heads_per_block(group, head_dim) != 0;
  const bool mma = decode_attention_mma_supported(kv_type, head_dim);
  if (mma && (forced == 5 || (forced == 0 && (max_keys >= kMmaFromKeys || uneven))))
    return DecodeAttentionKernel::kMma;
  return v4 && forced != 2 ? DecodeAttentionKernel::kV4 : DecodeAttentionKernel::kV2;
}

int64_t attention_split_keys(DecodeAttentionKernel kernel) {
  switch (kernel) {
    case DecodeAttentionKernel::kMma:
      return decode_attention_mma_split_keys();
    case DecodeAttentionKernel::kV4:
      return decode_attention_v4_split_keys();
    default:
      return 64;
  }
}

int64_t attention_heads_per_block(DecodeAttentionKernel kernel, int64_t head_dim, int64_t group) {
  switch (kernel) {
    case DecodeAttentionKernel::kMma:
      return decode_attention_mma_heads_per_block(group);
    case DecodeAttentionKernel::kV4:
      return decode_attention_v4_heads_per_block(group, head_dim);
    default:
      return decode_attention_v2_heads_per_block(group);
  }
}

int64_t attention_blocks_per_sm(DecodeAttentionKernel kernel, int64_t head_dim) {
  return kernel == DecodeAttentionKernel::kMma ? decode_attention_mma_blocks_per_sm(head_dim) : 4;
}

bool attention_supported(TensorType kv_type, int64_t head_dim, int64_t group) {
  const bool type_ok = kv_type == TensorType::F32 || kv_type == TensorType::F16 ||
                       kv_type == TensorType::BF16 || kv_type == TensorType::Q8_0;
  return type_ok && head_dim % 8 == 0 && head_dim <= 256 && head_dim >= 8 && group >= 1;
}

cudaError_t attention(const AttentionLaunch& a, cudaStream_t stream) {
  if (a.tokens == 0) return cudaSuccess;
  if ((a.out_q8.qs != nullptr && !attention_output_quantizes(a, a.out_q8.group)) ||
      (a.fold_rope && !attention_folds_rope(a))) {
    return cudaErrorInvalidValue;
  }
  bool launched = false;
  if (a.decode_kernel == DecodeAttentionKernel::kMma) {
    const cudaError_t status = decode_attention_mma(a, stream);
    if (status != cudaSuccess) return status;
    launched = true;
  } else if (a.decode_kernel == DecodeAttentionKernel::kV4) {
    launched = decode_attention_v4(a, stream);
  }
  if (!launched) decode_attention_v2(a, stream);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess || a.splits == 1) return status;
  return attention_combine(a, stream);
}

}  // namespace tern::cuda
