// The paged KV cache: a pool of fixed-size blocks per layer and a block table per sequence.
// Reserving room never throws: it answers "no room" so the caller (scheduler) can decide.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/device/device.h"
#include "base/error.h"

namespace tern {

struct KvCacheConfig {
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;            // tokens per block
  int64_t blocks = 0;                 // blocks in the pool, shared by all sequences
  TensorType type = TensorType::F16;  // F16, BF16 or Q8_0 (head_dim a multiple of 32)
};

// One sequence's view of the cache: its blocks, in position order, and how many positions hold
// computed keys and values.
struct SequenceKv {
  std::vector<int32_t> blocks;
  int64_t length = 0;  // positions written
};

class KvCache {
 public:
  static Result<KvCache> create(Device& device, const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  KvLayer& layer(int64_t index) { return layers_[static_cast<size_t>(index)]; }
  // Every layer's storage (the KV ops of a step plan: copying blocks, moving slots).
  std::span<KvLayer> layers() { return layers_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t capacity_tokens() const { return config_.blocks * config_.block_size; }
  size_t bytes() const;

  // Makes room for positions [0, positions) of `seq`; false (nothing changed) when the pool
  // lacks the blocks.
  bool reserve(SequenceKv& seq, int64_t positions);
  // Returns a sequence's blocks to the pool.
  void release(SequenceKv& seq);
  // Slots (block * block_size + offset) of positions [first, first + count) of `seq`.
  std::vector<int32_t> slots(const SequenceKv& seq, int64_t first, int64_t count) const;

 private:
  KvCacheConfig config_;
  std::vector<DeviceBuffer> storage_;
  std::vector<KvLayer> layers_;
  std::vector<int32_t> free_;  // a stack of free block ids
};

}  // namespace tern
