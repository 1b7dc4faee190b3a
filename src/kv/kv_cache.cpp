#include "kv/kv_cache.h"

namespace tern {

Result<KvCache> KvCache::create(Device& device, const KvCacheConfig& config) {
  if (config.type != TensorType::F16 && config.type != TensorType::BF16 &&
      config.type != TensorType::Q8_0 && config.type != TensorType::F32) {
    return make_error("KV cache type {} is not supported (F16, BF16, Q8_0, F32)",
                      tensor_type_name(config.type));
  }
  const auto& info = tensor_type_info(config.type);
  if (config.head_dim % info.block_elements != 0) {
    return make_error("KV cache type {} needs a head size that is a multiple of {}, not {}",
                      info.name, info.block_elements, config.head_dim);
  }
  if (config.layers <= 0 || config.kv_heads <= 0 || config.block_size <= 0 || config.blocks <= 0) {
    return make_error("KV cache needs layers, heads, block size and blocks > 0");
  }
  KvCache cache;
  cache.config_ = config;
  const int64_t rows = config.blocks * config.block_size * config.kv_heads;
  const size_t bytes = static_cast<size_t>(rows) *
                       static_cast<size_t>(config.head_dim / info.block_elements) *
                       info.block_bytes;
  for (int64_t l = 0; l < config.layers; ++l) {
    KvLayer layer;
    layer.block_size = config.block_size;
    layer.kv_heads = config.kv_heads;
    layer.head_dim = config.head_dim;
    for (Tensor* t : {&layer.k, &layer.v}) {
      auto buffer = device.allocate(bytes);
      if (!buffer) return buffer.error();
      t->data = buffer->data();
      t->type = config.type;
      t->ne = {config.head_dim, config.kv_heads, config.block_size, config.blocks};
      cache.storage_.push_back(std::move(*buffer));
    }
    cache.layers_.push_back(layer);
  }
  for (int64_t b = config.blocks - 1; b >= 0; --b) cache.free_.push_back(static_cast<int32_t>(b));
  return cache;
}

size_t KvCache::bytes() const {
  size_t n = 0;
  for (const auto& b : storage_) n += b.bytes();
  return n;
}

bool KvCache::reserve(SequenceKv& seq, int64_t positions) {
  const int64_t needed = (positions + config_.block_size - 1) / config_.block_size;
  const int64_t more = needed - static_cast<int64_t>(seq.blocks.size());
  if (more <= 0) return true;
  if (more > free_blocks()) return false;
  for (int64_t i = 0; i < more; ++i) {
    seq.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvCache::release(SequenceKv& seq) {
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) free_.push_back(*it);
  seq.blocks.clear();
  seq.length = 0;
}

std::vector<int32_t> KvCache::slots(const SequenceKv& seq, int64_t first, int64_t count) const {
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t p = first + i;
    out[static_cast<size_t>(i)] = static_cast<int32_t>(
        seq.blocks[static_cast<size_t>(p / config_.block_size)] * config_.block_size +
        p % config_.block_size);
  }
  return out;
}

}  // namespace tern
