#include "io/catalog.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tern {

extern const char* const kBuiltinCatalogJson;  // generated from data/catalog.json

uint64_t CatalogModel::kv_bytes(int64_t tokens) const {
  return static_cast<uint64_t>(layers * kv_heads * head_dim * 2 * 2) *
         static_cast<uint64_t>(tokens);
}

const CatalogFile* CatalogModel::file_for(const std::string& quantization) const {
  for (const auto& f : files) {
    if (f.quantization == quantization) return &f;
  }
  return nullptr;
}

bool CatalogModel::pinned() const {
  return revision.size() == 40 &&
         std::all_of(revision.begin(), revision.end(), [](char c) { return std::isxdigit(c); });
}

Result<Catalog> Catalog::parse(const std::string& json_text) {
  auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded()) return Error{"the model catalog is not valid JSON"};
  Catalog c;
  try {
    for (const auto& [name, bits] : j.at("quantizations").items()) {
      c.quantizations.push_back({name, bits.get<double>()});
    }
    std::stable_sort(
        c.quantizations.begin(), c.quantizations.end(),
        [](const auto& a, const auto& b) { return a.bits_per_weight > b.bits_per_weight; });
    for (const auto& m : j.at("models")) {
      CatalogModel model;
      model.name = m.at("name").get<std::string>();
      model.family = m.at("family").get<std::string>();
      model.repo = m.at("repo").get<std::string>();
      model.revision = m.value("revision", "main");
      model.parameters = m.at("parameters").get<uint64_t>();
      model.layers = m.at("layers").get<int64_t>();
      model.kv_heads = m.at("kv_heads").get<int64_t>();
      model.head_dim = m.at("head_dim").get<int64_t>();
      model.context = m.at("context").get<int64_t>();
      for (const auto& q : c.quantizations) {  // most precise first
        if (m.at("files").contains(q.name))
          model.files.push_back({q.name, m["files"][q.name].get<std::string>()});
      }
      for (const auto& [quant, path] : m.at("files").items()) {
        if (!model.file_for(quant))
          return make_error("the model catalog: {} has a file for {}, which has no bits per weight",
                            model.name, quant);
      }
      if (model.files.empty())
        return make_error("the model catalog: {} lists no files", model.name);
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

Result<Catalog> Catalog::load() {
  const char* path = std::getenv("TERN_CATALOG");
  if (path == nullptr || *path == '\0') return builtin();
  std::ifstream in(path);
  if (!in) return make_error("cannot read the model catalog {} ($TERN_CATALOG)", path);
  std::stringstream text;
  text << in.rdbuf();
  auto c = parse(text.str());
  if (!c) return make_error("{} ($TERN_CATALOG): {}", path, c.error().message);
  return c;
}

const CatalogModel* Catalog::find(const std::string& name) const {
  for (const auto& m : models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::optional<double> Catalog::bits_per_weight(const std::string& quantization) const {
  for (const auto& q : quantizations) {
    if (q.name == quantization) return q.bits_per_weight;
  }
  return std::nullopt;
}

std::vector<MemoryFit> Catalog::fits(const CatalogModel& model, uint64_t budget_bytes,
                                     int64_t context_tokens) const {
  std::vector<MemoryFit> out;
  const uint64_t kv = model.kv_bytes(std::min(context_tokens, model.context));
  for (const auto& f : model.files) {
    MemoryFit fit;
    fit.quantization = f.quantization;
    fit.weight_bytes = static_cast<uint64_t>(static_cast<double>(model.parameters) *
                                             bits_per_weight(f.quantization).value_or(16) / 8.0);
    fit.kv_bytes = kv;
    fit.fits = fit.weight_bytes + kv + kReserveBytes <= budget_bytes;
    out.push_back(fit);
  }
  return out;
}

std::optional<std::string> Catalog::recommend(const CatalogModel& model, uint64_t budget_bytes,
                                              int64_t context_tokens) const {
  for (const auto& fit : fits(model, budget_bytes, context_tokens)) {
    if (fit.fits) return fit.quantization;
  }
  return std::nullopt;
}

}  // namespace tern
