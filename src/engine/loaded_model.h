// Everything needed to run one model: its file, device, weights, tokenizer and KV cache.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "backend/comm/communicator.h"
#include "backend/device/device.h"
#include "base/error.h"
#include "config/model_info.h"
#include "engine/tp_ranks.h"
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
  // Tensor parallelism: the model split over this many processes, one rank each
  // (engine/tp_ranks.h), started by mpirun, or given `rendezvous` and `rank`. 1: the whole
  // model in this process.
  int tp = 1;
  // Without mpirun: rank 0's HOST:PORT, where the ranks meet over TCP, and this process's rank
  // (-1: none given); the other ranks are waited for `rendezvous_timeout`.
  std::string rendezvous;
  int rank = -1;
  std::chrono::milliseconds rendezvous_timeout{60000};
};

struct LoadedModel {
  std::string path;
  GgufFile file;
  ModelInfo info;
  // Tensor parallelism's ranks (null with --tp 1): Open MPI's or TCP's, or NCCL's over the GPUs
  // with `bootstrap` (Open MPI or TCP) having carried its unique id.
  std::unique_ptr<Communicator> bootstrap;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Device> device;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // empty when the file has none
  std::unique_ptr<KvCache> cache;
  int64_t context = 0;  // tokens the cache holds for one sequence
  // Tokens one forward takes of a long prompt (prefill_chunk_tokens() below chose it).
  int64_t prefill_chunk = 512;

  // Rank 0 of a tensor-parallel group: why the group can no longer run the model (a rank died,
  // over TCP), empty while it can (and without tensor parallelism).
  std::shared_ptr<GroupStatus> group;
  std::string unavailable() const { return group ? group->failure() : std::string(); }

  // A rank other than 0 of a tensor-parallel group: it runs follow() instead of serving.
  bool follower() const { return comm != nullptr && comm->rank() != 0; }
  // A follower's whole job: rank 0's forward passes until it stops (engine/tp_ranks.h).
  Result<void> follow();
};

// Tokens one forward should take of a long prompt. On the GPU, more tokens a forward amortize
// what each forward pays whatever its length (every quantized matrix dequantized to BF16 for
// cuBLAS, all the weights read): up to 2,048 while the chunk's activations (estimated from the
// shape: F32 hidden, attention and feed-forward rows, and their BF16 copies) stay within 768 MiB
// of the 1 GiB kept free beside the weights and KV cache. On the CPU 512 (its products work in
// cache-sized tiles whatever the chunk). TERN_PREFILL_CHUNK (16-65536) overrides both.
// feed_forward: the model's feed-forward width (0: unknown, taken as 4 x hidden).
int64_t prefill_chunk_tokens(const ModelShape& shape, int64_t feed_forward, bool on_gpu);

// With options.tp > 1 every rank calls this (collectively): each loads its share, rank 0's
// model announces each forward to the others, and a failure on any rank fails all of them.
Result<std::unique_ptr<LoadedModel>> load_model_file(const std::string& path,
                                                     const LoadOptions& options);

}  // namespace tern
