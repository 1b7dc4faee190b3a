// Causal attention over the paged KV cache on the CPU, flash-attention style: keys and values are
// read block by block, each block's rows converted to float once and used by every query head
// that shares them (grouped-query attention), with an online softmax.
//
// Reads: q [n, heads, head_dim] F32; the cache's K and V rows (F32, F16, BF16 or Q8_0) of every
// position each new token attends to. Writes: out [n, heads, head_dim] F32.
#pragma once

#include <span>

#include "backend/device/device.h"
#include "base/thread_pool.h"

namespace tern {

void cpu_attention(const Tensor& q, const KvLayer& cache,
                   std::span<const AttentionSequence> sequences, const AttentionParams& params,
                   Tensor& out, ThreadPool& pool);

}  // namespace tern
