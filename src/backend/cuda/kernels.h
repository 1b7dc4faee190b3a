// Host-side launchers of the CUDA kernels (one .cu file each). Every launcher enqueues on the
// given stream, never synchronises, and returns the launch status (cudaGetLastError).
// Activations are F32 row-major; weights keep their GGUF block layout.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/tensor_type.h"

namespace tern::cuda {

// Whether `type` has a device dequantizer (and so matmul/get_rows on the GPU).
bool is_supported(TensorType type);

// get_rows.cu: out[i, :] = row ids[i] of table [rows, cols] as F32 (ids on the device; rows
// outside [0, rows) give zeros: the host checks ids first).
cudaError_t get_rows(TensorType type, const void* table, int64_t rows, int64_t cols,
                     const int32_t* ids, int64_t n, float* out, cudaStream_t stream);

// dequantize.cu: out [rows, cols] BF16 (uint16 bits) = the values of weight rows.
cudaError_t dequantize_bf16(TensorType type, const void* w, int64_t rows, int64_t cols,
                            uint16_t* out, cudaStream_t stream);
// convert.cu: out[i] = x[i] rounded to BF16 / F16 (uint16 bits).
cudaError_t f32_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);
cudaError_t f32_to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);

// gemv_*.cu: y[j, :] = W [m, k] . x[j, :] for j < n, n <= kMaxGemvRows (decode).
constexpr int64_t kMaxGemvRows = 8;
cudaError_t gemv_float(TensorType type, const void* w, int64_t m, int64_t k, const float* x,
                       int64_t n, float* y, cudaStream_t stream);
// One token's products of up to kMaxGemvFloatMulti F32/F16/BF16 matrices of one type sharing
// x [k] (k % 8 == 0) in one launch: q, k and v; gate and up.
constexpr int kMaxGemvFloatMulti = 3;
struct GemvFloatMulti {
  TensorType type = TensorType::BF16;
  const void* w[kMaxGemvFloatMulti] = {};
  int64_t m[kMaxGemvFloatMulti] = {};
  float* y[kMaxGemvFloatMulti] = {};
  int count = 0;
  // Gated activation (count == 2, w[0] gate and w[1] up of m[0] rows each): out = act(gate . x)
  // * (up . x), the two products still written to y[0] and y[1]. 0: none, 1: SiLU, 2: GELU (tanh).
  int glu = 0;
  float* out = nullptr;
};
bool gemv_float_multi_supported(TensorType type, int64_t k);
cudaError_t gemv_float_multi(const GemvFloatMulti& g, int64_t k, const float* x,
                             cudaStream_t stream);
// Dequantize-and-dot with F32 activations; any block type of is_supported.
cudaError_t gemv_blocks(TensorType type, const void* w, int64_t m, int64_t k, const float* x,
                        int64_t n, float* y, cudaStream_t stream);
// Activations quantized to 8-bit blocks of 32 (quantize_q8 into `xq`), integer dot products.
bool gemv_q8_supported(TensorType type);
size_t q8_activation_bytes(int64_t n, int64_t k);
// The layout quantize_q8 writes into `xq` (q8_activation_bytes(n, k) bytes): qs [n, k] int8, then
// the blocks' scales d [n, k / 32] and scaled sums s [n, k / 32] (s = d * sum of the block's qs).
struct Q8Activations {
  const int8_t* qs;
  const float* d;
  const float* s;
};
inline Q8Activations q8_activations(const void* xq, int64_t n, int64_t k) {
  const auto* qs = static_cast<const int8_t*>(xq);
  const auto* d = reinterpret_cast<const float*>(qs + (static_cast<size_t>(n * k) + 15) / 16 * 16);
  return {qs, d, d + n * (k / 32)};
}
// The values one activation scale covers for products with `type` weights, as on the CPU backend:
// 256 for the super-block types (its Q8x256), 32 for the others (Q8x32).
int q8_group(TensorType type);
// group 32 or 256 (k a multiple of it): amax, and so d, over each group of values; the layout
// stays per 32.
cudaError_t quantize_q8(const float* x, int64_t n, int64_t k, int group, void* xq,
                        cudaStream_t stream);
cudaError_t gemv_q8(TensorType type, const void* w, int64_t m, int64_t k, const void* xq, int64_t n,
                    float* y, cudaStream_t stream);
// gemv_mma.cu: products of 2 <= n <= 8 rows of 8-bit activations (quantize_q8's layout) with
// Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K weights on the int8 tensor cores; Q4_K and Q6_K by
// default, every type with TERN_CUDA_GEMV_MMA=1, none with =0 (gemv_mma_enabled).
bool gemv_mma_enabled(TensorType type, int64_t k);
cudaError_t gemv_mma(TensorType type, const void* w, int64_t m, int64_t k, const int8_t* qs,
                     const float* d, const float* s, int64_t n, float* y, cudaStream_t stream);
// gemm_q8.cu: the same products for any n (prefill), tiled 64 x 64 on the int8 tensor cores.
bool gemm_q8_supported(TensorType type, int64_t k);
cudaError_t gemm_q8(TensorType type, const void* w, int64_t m, int64_t k, const void* xq, int64_t n,
                    float* y, cudaStream_t stream);
// Fused decode products of one token (n = 1) sharing the 8-bit x [k]: up to kMaxGemvMulti
// matrices in one launch (q, k and v), and gate/up with the gated activation written too.
struct GemvQ8Matrix {
  const void* w = nullptr;
  TensorType type = TensorType::Q8_0;
  int64_t m = 0;
  size_t row_bytes = 0;  // gemv_q8_row_bytes(type, k)
  float* y = nullptr;    // [m]
};
constexpr int kMaxGemvMulti = 4;
struct GemvQ8Multi {
  GemvQ8Matrix mats[kMaxGemvMulti];
  int64_t block_ends[kMaxGemvMulti] = {};  // cumulative gemv_q8_blocks(m) of mats[0..i]
  int count = 0;
};
size_t gemv_q8_row_bytes(TensorType type, int64_t k);
int64_t gemv_q8_blocks(int64_t m);
cudaError_t gemv_q8_multi(const GemvQ8Multi& g, int64_t k, const void* xq, cudaStream_t stream);
// Where a launch also writes the 8-bit copy (quantize_q8's bytes, groups of 32 or 256) of its
// one-token output for the product that reads it next, instead of a quantize launch: the gate/up
// product for down (gemv_q8_glu) and decode attention's combine step for the o projection
// (attention). gate/up: the last writer to finish a group quantizes it (counters:
// kQ8OutputGroups words, zero before the launch and left zero); the combine step: one block
// takes a group's heads and needs no counters. qs == nullptr: off.
constexpr int64_t kQ8OutputGroups = 4096;
struct Q8Output {
  int8_t* qs = nullptr;
  float* d = nullptr;
  float* s = nullptr;
  uint32_t* counters = nullptr;
  int group = 256;  // values a scale covers (q8_group): 32 or 256
};
// Whether gemv_q8_glu takes a Q8Output of `group` for these matrices (the row-pair kernels, m a
// multiple of the group and at most kQ8OutputGroups groups).
bool gemv_q8_glu_quantizes(const GemvQ8Matrix& gate, const GemvQ8Matrix& up, int64_t k, int group);
// gate.y = gate . x, up.y = up . x, out = act(gate.y) * up.y (SiLU, or tanh-GELU when gelu).
cudaError_t gemv_q8_glu(const GemvQ8Matrix& gate, const GemvQ8Matrix& up, int64_t k, const void* xq,
                        bool gelu, float* out, cudaStream_t stream, const Q8Output& quant = {});

// norm.cu: each row of x [rows, cols] divided by its RMS, times weight [cols] when not null.
cudaError_t rms_norm(const float* x, const float* weight, float eps, int64_t rows, int64_t cols,
                     float* out, cudaStream_t stream);
// Fused forms, each equal to its op sequence: when `b` is given, sum = a + b is written first
// (the residual add) and normalized; when `xq` is given (norm_q8_supported(cols, group)), the
// output is also quantized into 8-bit blocks exactly as quantize_q8 would (rows, cols, group).
bool norm_q8_supported(int64_t cols, int group);
cudaError_t add_rms_norm_q8(const float* a, const float* b, float* sum, const float* weight,
                            float eps, int64_t rows, int64_t cols, float* out, void* xq, int group,
                            cudaStream_t stream);
// rms_norm of each head row in place followed by rope, for one or two tensors of heads (a layer's
// q and k) of the same tokens: x [n, heads, head_dim], equal to the two ops apart; head_dim a
// multiple of 4 up to 512 (rms_norm_rope_supported).
struct NormRopeHeads {
  float* x = nullptr;
  const float* weight = nullptr;  // [head_dim] or null
  float eps = 0.0f;
  int64_t heads = 0;
  bool norm = true;  // false: rope alone (models without q/k norms)
};
struct NormRopeLaunch {
  NormRopeHeads parts[2];
  int count = 1;
  int64_t head_dim = 0, n = 0;
  const int32_t* positions = nullptr;  // [n], device
  const float* inv_freq = nullptr;     // [rotary_dim / 2], device
  int64_t rotary_dim = 0;
  bool neox = false;
  float position_scale = 1.0f;
  // Optionally (count 2, F16 caches) store_kv's work too: parts[1] (the keys, after rope) and v
  // [n, parts[1].heads, head_dim] written as F16 at rows slots[t] * parts[1].heads + h.
  uint16_t* k_cache = nullptr;
  uint16_t* v_cache = nullptr;
  const float* v = nullptr;
  const int32_t* slots = nullptr;  // [n], device
};
cudaError_t rms_norm_rope(const NormRopeLaunch& launch, cudaStream_t stream);
bool rms_norm_rope_supported(int64_t head_dim);

// elementwise.cu
cudaError_t add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
cudaError_t add_row_vector(float* x, const float* v, int64_t rows, int64_t cols,
                           cudaStream_t stream);
cudaError_t scale(float* x, float factor, int64_t n, cudaStream_t stream);
// dst[rows[i], :] += weights[i] * src[i, :] for i < n (rows distinct; rows and weights on the
// device).
// ids[r] = the first index of the maximum of row r of x [rows, cols] (greedy sampling).
cudaError_t argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* ids,
                        cudaStream_t stream);
// sample.cu: ids[r] = the token row r of x [rows, cols] picks with draws[r] (on the device), as
// pick_token (backend/device/sample_pick.h) does on the host. `workspace`: sample_workspace_bytes.
struct DrawParams {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  double uniform;
};
size_t sample_workspace_bytes(int64_t cols);
cudaError_t sample_rows(const float* x, int64_t rows, int64_t cols, const DrawParams* draws,
                        int32_t* ids, void* workspace, cudaStream_t stream);
cudaError_t add_weighted_rows(const float* src, const int32_t* rows, const float* weights,
                              int64_t n, int64_t cols, float* dst, cudaStream_t stream);
cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n,
                     cudaStream_t stream);
cudaError_t gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n,
                          cudaStream_t stream);

// rope.cu: x [n, heads, head_dim] rotated in place; inv_freq [rotary_dim / 2] on the device.
cudaError_t rope(float* x, int64_t head_dim, int64_t heads, int64_t n, const int32_t* positions,
                 const float* inv_freq, int64_t rotary_dim, bool neox, float position_scale,
                 cudaStream_t stream);

// kv_store.cu: rows of k, v [n, kv_heads, head_dim] written at slots[n] of the paged caches.
cudaError_t store_kv(TensorType type, void* k_cache, void* v_cache, const float* k, const float* v,
                     const int32_t* slots, int64_t n, int64_t kv_heads, int64_t head_dim,
                     cudaStream_t stream);

// attention.cu: paged causal attention, split over the context (flash-decoding style): the
// dispatch over the decode kernels below.
// The decode kernels attention() can take: v2 (attention_decode_any_cache.cu: any cache type), v4
// (attention_decode_f16_bf16.cu: F16/BF16 caches, heads of 64, 128 or 256), and the tensor-core
// one (attention_decode_mma.cu: F16 caches, those heads).
enum class DecodeAttentionKernel : int32_t { kV2, kV4, kMma };
struct AttentionLaunch {
  const float* q = nullptr;  // [tokens, heads, head_dim]
  float* out = nullptr;      // [tokens, heads, head_dim]
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  TensorType kv_type = TensorType::F16;
  int64_t tokens = 0, heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  // Per sequence, 4 ints: first_token, token_count, first_position, offset of its block table
  // in `tables`. Sorted by first_token.
  const int32_t* sequences = nullptr;
  int32_t sequence_count = 0;
  const int32_t* tables = nullptr;
  float scale = 1.0f, softcap = 0.0f;
  int64_t window = 0;
  int32_t splits = 1;        // parts of each token's context computed by separate blocks
  float* partial = nullptr;  // [tokens * heads * splits, head_dim + 2] when splits > 1
  // Token trees (null: every sequence causal): per batch token, its 64-bit ancestor mask as two
  // words (low, high); bit j lets it see its sequence's new token j (slot first_position + j).
  // Tokens of causal sequences carry all ones.
  const uint32_t* ancestors = nullptr;
  // The decode kernel attention() runs (decode_attention_kernel picks it).
  DecodeAttentionKernel decode_kernel = DecodeAttentionKernel::kV2;
  // One token, splits > 1: combine_kernel writes out's 8-bit copy too (attention_output_quantizes).
  Q8Output out_q8;
  // The keys before each sequence's first new position were written before this step began
  // (no earlier op of the step stored into this cache): the v4 kernel may load them before its
  // PDL wait, while the launch before it (the q/k norm + RoPE that stores the new keys, or with
  // fold_rope the q/k/v product) runs.
  bool early_keys = false;
  // One token's decode with the layer's q/k norm + RoPE launch and its cache store folded in
  // (the v4 kernel; attention_folds_rope):
  // rope.parts[0].x and parts[1].x hold q and k as the q/k/v product wrote them, rope.v the
  // values, rope.slots the new key's slot. Each block norms
  // and rotates its query heads (`q` is not read), the blocks of the split holding the new key
  // the key too (F16, as the cache would give it back); the first split's blocks write the
  // rotated q to q_out, and the first block of the new key's KV head writes the rotated key to
  // k_out and the key and values into the caches, as rms_norm_rope would have.
  bool fold_rope = false;
  NormRopeLaunch rope;
  float* q_out = nullptr;
  float* k_out = nullptr;
};
// Whether the decode attention of `a` (its kernel, shape and a.rope set) can take the q/k norm +
// RoPE launch's work over (fold_rope).
bool attention_folds_rope(const AttentionLaunch& a);
bool attention_supported(TensorType kv_type, int64_t head_dim, int64_t group);
// The one for this cache, GQA group (query heads a KV head) and the most keys a token of the
// batch sees: the tensor-core kernel from 8K keys on, or for groups v4 would cut into uneven
// blocks; v4 otherwise (attention.cu says why). TERN_CUDA_ATTN=mma / 4 / 2 takes one kernel
// everywhere (A/B runs).
DecodeAttentionKernel decode_attention_kernel(TensorType kv_type, int64_t head_dim, int64_t group,
                                              int64_t max_keys);
// The fewest keys a context split should get with that kernel.
int64_t attention_split_keys(DecodeAttentionKernel kernel);
// The query heads one block of that kernel holds (the rest of a group: more blocks).
int64_t attention_heads_per_block(DecodeAttentionKernel kernel, int64_t head_dim, int64_t group);
// The blocks a multiprocessor should get (the host splits contexts until there are that many):
// v4 and v2 4 (measured best on the H100 with two query heads a block), the tensor-core kernel
// as many as fit at once (one wave: its warps keep their loads in flight through the split).
int64_t attention_blocks_per_sm(DecodeAttentionKernel kernel, int64_t head_dim);
// Runs a.decode_kernel (prefill_attention below is the many-token kernel).
cudaError_t attention(const AttentionLaunch& a, cudaStream_t stream);
// Whether attention() takes an out_q8 of `group`: one token, split contexts (the combine step
// writes the output); group 32: head_dim a multiple of 32 (each warp quantizes what it wrote);
// group 256: heads dividing it and k = heads x head_dim a multiple of it.
bool attention_output_quantizes(const AttentionLaunch& a, int group);
// attention_decode_any_cache.cu ("v2"): the decode kernel on the CUDA cores for every cache type
// and head size (attention_supported), a lane a key; attention() takes it where the others
// cannot.
int64_t decode_attention_v2_heads_per_block(int64_t group);
void decode_attention_v2(const AttentionLaunch& a, cudaStream_t stream);
// attention_decode_f16_bf16.cu ("v4"): the decode kernel on the CUDA cores for F16/BF16 caches
// with heads of 64, 128 or 256, 8 lanes a key. False (nothing launched) for a head count a block
// cannot take.
int64_t decode_attention_v4_heads_per_block(int64_t group, int64_t head_dim);
int64_t decode_attention_v4_split_keys();
bool decode_attention_v4(const AttentionLaunch& a, cudaStream_t stream);
// attention_combine.cu: the splits' partials merged into out (and out_q8).
cudaError_t attention_combine(const AttentionLaunch& a, cudaStream_t stream);
// attention_decode_mma.cu: the decode kernel on the tensor cores (F16 caches, heads of 64, 128 or
// 256; token trees too), which attention() takes for long contexts; launches the split
// kernel only (attention() merges the splits).
bool decode_attention_mma_supported(TensorType kv_type, int64_t head_dim);
int64_t decode_attention_mma_heads_per_block(int64_t group);
int64_t decode_attention_mma_split_keys();
int64_t decode_attention_mma_blocks_per_sm(int64_t head_dim);
cudaError_t decode_attention_mma(const AttentionLaunch& a, cudaStream_t stream);
// attention_prefill.cu: the same for many new tokens on the tensor cores (F16 caches, heads of 64
// or 128, no token trees; `splits` and `partial` unused). tiles: [tile_count][2] ints, a
// sequence's index and the first batch token of 64 of its new tokens.
bool prefill_attention_supported(const AttentionLaunch& a);
cudaError_t prefill_attention(const AttentionLaunch& a, const int32_t* tiles, int64_t tile_count,
                              cudaStream_t stream);
// attention_prefill_ws.cu: the same on Hopper's warpgroup products (compute capability 9.0 only;
// the same tiles and launch arguments) with copy warps and two math warpgroups a block
// (FlashAttention-3's structure; two query heads of a KV head a block, so even GQA groups only).
// prefill_attention takes it where it can (split_p: P as two f16 halves; q_in_registers: Q's
// fragments in registers at heads of 128, else in shared memory; the default both).
bool prefill_attention_ws_supported(const AttentionLaunch& a);
cudaError_t prefill_attention_ws(const AttentionLaunch& a, const int32_t* tiles, int64_t tile_count,
                                 cudaStream_t stream, bool split_p, bool q_in_registers);

}  // namespace tern::cuda
