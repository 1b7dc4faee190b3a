#include "io/model_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/progress_bar.h"

namespace tern {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifest = "model.json";

Result<StoredModel> read_manifest(const fs::path& dir) {
  fs::path path = dir / kManifest;
  std::ifstream in(path);
  if (!in) return make_error("cannot read {}", path.string());
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error("{} is not valid JSON", path.string());
  StoredModel m;
  try {
    m.name = j.at("name").get<std::string>();
    for (const auto& f : j.at("files")) m.files.push_back((dir / f.get<std::string>()).string());
    m.architecture = j.value("architecture", "");
    m.quantization = j.value("quantization", "");
    m.parameter_count = j.value("parameter_count", uint64_t{0});
    m.source = j.value("source", "");
  } catch (const nlohmann::json::exception& e) {
    return make_error("{}: {}", path.string(), e.what());
  }
  if (m.files.empty()) return make_error("{} lists no files", path.string());
  m.directory = dir.string();
  for (const auto& f : m.files) {
    std::error_code ec;
    auto size = fs::file_size(f, ec);
    if (ec) return make_error("model '{}': file {} is missing", m.name, f);
    m.size_bytes += size;
  }
  return m;
}

// Copies src to dst (atomically), drawing a progress bar.
Result<void> copy_with_progress(const std::string& src, const std::string& dst) {
  auto mapped = MappedFile::open(src);
  if (!mapped) return mapped.error();
  auto out = AtomicFileWriter::create(dst);
  if (!out) return out.error();
  ProgressBar bar("importing " + fs::path(src).filename().string(), mapped->size());
  constexpr size_t kChunk = size_t{8} << 20;
  for (size_t at = 0; at < mapped->size(); at += kChunk) {
    size_t n = std::min(kChunk, mapped->size() - at);
    TERN_TRY(out->write({mapped->data() + at, n}));
    bar.update(at + n);
  }
  bar.finish();
  return out->commit();
}

}  // namespace

ModelStore::ModelStore(std::string home) : home_(std::move(home)) {}

std::string ModelStore::default_home() {
  if (const char* h = std::getenv("TERN_HOME"); h && *h) return h;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tern";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/tern";
}

std::string ModelStore::models_directory() const {
  return home_ + "/models";
}

Result<void> ModelStore::check_name(const std::string& name) {
  if (name.empty() || name.size() > 128)
    return make_error("model name must be 1 to 128 characters");
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == ':')) {
      return make_error("model name '{}' may only hold letters, digits and - _ . :", name);
    }
  }
  if (name[0] == '.') return make_error("model name '{}' may not start with a dot", name);
  return {};
}

Result<std::vector<StoredModel>> ModelStore::list() const {
  std::vector<StoredModel> models;
  std::error_code ec;
  fs::path dir = models_directory();
  if (!fs::exists(dir, ec)) return models;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_directory() || !fs::exists(entry.path() / kManifest)) continue;
    auto m = read_manifest(entry.path());
    if (m) models.push_back(std::move(*m));
  }
  if (ec) return make_error("cannot list {}: {}", dir.string(), ec.message());
  std::sort(models.begin(), models.end(),
            [](const StoredModel& a, const StoredModel& b) { return a.name < b.name; });
  return models;
}

Result<StoredModel> ModelStore::find(const std::string& name) const {
  TERN_TRY(check_name(name));
  fs::path dir = fs::path(models_directory()) / name;
  if (!fs::exists(dir / kManifest)) {
    std::string installed;
    if (auto all = list(); all) {
      for (const auto& m : *all) installed += (installed.empty() ? "" : ", ") + m.name;
    }
    return make_error("unknown model '{}' (installed: {}); `tern list` shows installed models",
                      name, installed.empty() ? "none" : installed);
  }
  return read_manifest(dir);
}

Result<std::string> ModelStore::resolve_model_file(const std::string& name_or_path) const {
  std::error_code ec;
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".gguf")) {
    // A .gguf file, or a Hugging Face directory (config.json + safetensors).
    if (fs::is_directory(name_or_path, ec) &&
        fs::exists(fs::path(name_or_path) / "config.json", ec)) {
      return name_or_path;
    }
    if (!fs::is_regular_file(name_or_path, ec)) {
      return make_error("model file {} does not exist", name_or_path);
    }
    return name_or_path;
  }
  auto m = find(name_or_path);
  if (!m) return m.error();
  return m->files.front();
}

Result<StoredModel> ModelStore::add(const std::string& name, const std::vector<std::string>& files,
                                    const ModelDescription& described, bool link) const {
  TERN_TRY(check_name(name));
  if (files.empty()) return make_error("no files to import");
  fs::path dir = fs::path(models_directory()) / name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error("cannot create {}: {}", dir.string(), ec.message());
  nlohmann::json manifest;
  manifest["name"] = name;
  manifest["files"] = nlohmann::json::array();
  for (const auto& src : files) {
    std::string filename = fs::path(src).filename().string();
    fs::path dst = dir / filename;
    if (fs::exists(dst) && fs::equivalent(src, dst, ec)) {
      // already in place
    } else {
      fs::remove(dst, ec);
      bool linked = link && ::link(src.c_str(), dst.c_str()) == 0;
      if (!linked) TERN_TRY(copy_with_progress(src, dst.string()));
    }
    manifest["files"].push_back(filename);
  }
  manifest["architecture"] = described.architecture;
  manifest["quantization"] = described.quantization;
  manifest["parameter_count"] = described.parameter_count;
  manifest["source"] =
      described.source.empty() ? fs::absolute(files.front(), ec).string() : described.source;
  std::string text = manifest.dump(2) + "\n";
  TERN_TRY(write_file_atomically((dir / kManifest).string(),
                                 {reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  return read_manifest(dir);
}

Result<void> ModelStore::remove(const std::string& name) const {
  auto m = find(name);
  if (!m) return m.error();
  std::error_code ec;
  // The manifest goes first so a half-removed model is never listed as installed.
  fs::remove(fs::path(m->directory) / kManifest, ec);
  fs::remove_all(m->directory, ec);
  if (ec) return make_error("cannot remove {}: {}", m->directory, ec.message());
  return {};
}

}  // namespace tern
