// Everything needed to run one model: its file, device, weights, tokenizer and KV cache.
#pragma once

#include <memory>
#include <string>

#include "backend/device/device.h"
#include "base/error.h"
#include "config/model_info.h"
#include "io/gguf_file.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "text/tokenizer.h"

namespace tern {

struct LoadOptions {
  std::string device = "cpu";  // "cpu", or "cuda" / "cuda:N" in a build with TERN_CUDA
  size_t threads = 0;          // 0: one per hardware thread
  int64_t context = 0;    // tokens one sequence may hold; 0: the model's limit, or what fits memory
  int64_t sequences = 1;  // sequences the KV pool holds at full context
  TensorType kv_type = TensorType::F16;
  bool progress = true;  // draw a progress bar while touching the weights
};

struct LoadedModel {
  std::string path;
  GgufFile file;
  ModelInfo info;
  std::unique_ptr<Device> device;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // empty when the file has none
  std::unique_ptr<KvCache> cache;
  int64_t context = 0;  // tokens the cache holds for one sequence
};

Result<std::unique_ptr<LoadedModel>> load_model_file(const std::string& path,
                                                     const LoadOptions& options);

}  // namespace tern
