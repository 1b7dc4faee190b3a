// CPU quantized tensors: dequantize and quantize rows of GGUF block types, and the products of a
// quantized weight matrix with float activations (matvec for decode, matmul for prefill).
//
// Weights are in GGUF row-major layout: row r of W[rows x cols] is cols / block_elements blocks.
// Activations are quantized inside, the way the weight type needs: 8-bit blocks of 32 with an fp32
// scale for the 32-block types, 8-bit blocks of 256 with 16-element sums for the K-quants and
// IQ4_XS, and plain fp32 for F32/F16/BF16.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "base/error.h"
#include "base/tensor_type.h"
#include "base/thread_pool.h"

namespace tern::cpu {

// Types with a CPU dequantizer and matvec/matmul: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K
// Q4_K Q5_K Q6_K IQ4_NL IQ4_XS.
bool is_supported(TensorType type);

// dst[0..n) = the values of the n elements at src. n must be a multiple of the block size.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// Types with a quantizer: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 (byte-exact with gguf-py's
// gguf.quants.quantize) and Q4_K Q6_K (own rounding search; gguf-py has no reference for them).
bool can_quantize(TensorType type);

// Writes the blocks of src[0..n) to dst and returns the bytes written (0 if the type cannot be
// quantized or n is not a multiple of the block size).
size_t quantize_row(TensorType type, const float* src, void* dst, int64_t n);

// Reusable activation scratch; pass one to avoid an allocation per call.
struct Scratch {
  std::vector<std::byte> bytes;
};

struct KernelOptions {
  std::optional<CpuPath> path;  // default: default_cpu_path()
  Scratch* scratch = nullptr;
};

// y[rows] = W[rows x cols] . x[cols].
Result<void> matvec(TensorType type, const void* w, int64_t rows, int64_t cols, const float* x,
                    float* y, ThreadPool& pool, const KernelOptions& options = {});

// Y[n x rows] = X[n x cols] . W^T, X and Y row-major (prefill: n activation rows).
Result<void> matmul(TensorType type, const void* w, int64_t rows, int64_t cols, const float* x,
                    int64_t n, float* y, ThreadPool& pool, const KernelOptions& options = {});

}  // namespace tern::cpu
