#include "io/catalog.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace tern {

extern const char* const kBuiltinCatalogJson;  // generated from data/catalog.json

uint64_t CatalogModel::kv_bytes(int64_t tokens) const {
  return static_cast<uint64_t>(layers * kv_heads * head_dim * 2 * 2) *
         static_cast<uint64_t>(tokens);
}

Result<Catalog> Catalog::parse(const std::string& json_text) {
  auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded()) return Error{"the model catalog is not valid JSON"};
  Catalog c;
  try {
    for (const auto& [name, bits] : j.at("quantizations").items()) {
      c.quantizations.push_back({name, bits.get<double>()});
    }
    std::sort(c.quantizations.begin(), c.quantizations.end(),
              [](const auto& a, const auto& b) { return a.bits_per_weight > b.bits_per_weight; });
    for (const auto& m : j.at("models")) {
      CatalogModel model;
      model.name = m.at("name").get<std::string>();
      model.family = m.at("family").get<std::string>();
      model.repo = m.value("repo", "");
      model.parameters = m.at("parameters").get<uint64_t>();
      model.layers = m.at("layers").get<int64_t>();
      model.kv_heads = m.at("kv_heads").get<int64_t>();
      model.head_dim = m.at("head_dim").get<int64_t>();
      model.context = m.at("context").get<int64_t>();
      c.models.push_back(std::move(model));
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error("the model catalog is malformed: {}", e.what());
  }
  return c;
}

Result<Catalog> Catalog::builtin() {
  return parse(kBuiltinCatalogJson);
}

}  // namespace tern
