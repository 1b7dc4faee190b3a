// The catalog of models Tern knows by name (data/catalog.json, compiled in; $TERN_CATALOG names
// another file, e.g. a private mirror's): their shapes, for memory estimates, and per
// quantization the GGUF file in the model's hub repository at a revision.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"

namespace tern {

struct CatalogFile {
  std::string quantization;  // e.g. Q4_K_M
  std::string path;          // the file's path in the repository
};

struct CatalogModel {
  std::string name;
  std::string family;
  std::string repo;
  std::string revision = "main";   // a commit once pinned (tools/catalog/pin_catalog.py)
  std::vector<CatalogFile> files;  // most precise first
  uint64_t parameters = 0;
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t context = 0;

  // Bytes of F16 KV cache for `tokens` tokens.
  uint64_t kv_bytes(int64_t tokens) const;
  const CatalogFile* file_for(const std::string& quantization) const;
  // A revision of 40 hex digits names one commit; a branch or tag can move.
  bool pinned() const;
};

struct CatalogQuantization {
  std::string name;
  double bits_per_weight = 0;
};

// What a model needs in memory with room for a context, and whether that fits a budget.
struct MemoryFit {
  std::string quantization;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  bool fits = false;
};

struct Catalog {
  std::vector<CatalogModel> models;
  std::vector<CatalogQuantization> quantizations;  // most precise first

  // Memory kept free beside a model's weights and KV cache (runtime buffers, the OS).
  static constexpr uint64_t kReserveBytes = uint64_t{1} << 30;

  static Result<Catalog> builtin();
  // $TERN_CATALOG when set, else the built-in one.
  static Result<Catalog> load();
  static Result<Catalog> parse(const std::string& json_text);

  const CatalogModel* find(const std::string& name) const;
  std::optional<double> bits_per_weight(const std::string& quantization) const;
  // Every file of the model, most precise first, with its estimated size for `context_tokens`.
  std::vector<MemoryFit> fits(const CatalogModel& model, uint64_t budget_bytes,
                              int64_t context_tokens) const;
  // The most precise quantization the model has that fits the budget; nullopt when none does.
  std::optional<std::string> recommend(const CatalogModel& model, uint64_t budget_bytes,
                                       int64_t context_tokens) const;
};

}  // namespace tern
