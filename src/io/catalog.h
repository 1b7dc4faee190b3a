// The catalog of models Tern knows by name (data/catalog.json, compiled in): their shapes, for
// memory estimates, and where their GGUF files live.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"

namespace tern {

struct CatalogModel {
  std::string name;
  std::string family;
  std::string repo;
  uint64_t parameters = 0;
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t context = 0;

  // Bytes of F16 KV cache for `tokens` tokens.
  uint64_t kv_bytes(int64_t tokens) const;
};

struct CatalogQuantization {
  std::string name;
  double bits_per_weight = 0;
};

struct Catalog {
  std::vector<CatalogModel> models;
  std::vector<CatalogQuantization> quantizations;  // most precise first

  static Result<Catalog> builtin();
  static Result<Catalog> parse(const std::string& json_text);
};

}  // namespace tern
