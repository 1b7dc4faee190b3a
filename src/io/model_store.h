// The local model store: $TERN_HOME/models/<name>/ holds a model's GGUF file(s) and a
// model.json manifest. Every write goes to a temp name and is renamed into place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"

namespace tern {

struct StoredModel {
  std::string name;
  std::string directory;
  std::vector<std::string> files;  // absolute paths; the first opens the model (split parts follow)
  std::string architecture;
  std::string quantization;
  uint64_t parameter_count = 0;
  uint64_t size_bytes = 0;
  std::string source;  // where it was imported from
};

struct ModelDescription {
  std::string architecture;
  std::string quantization;
  uint64_t parameter_count = 0;
  std::string source;  // recorded as the model's source; empty: the first file's path
};

class ModelStore {
 public:
  // `home` is the Tern home directory; see default_home().
  explicit ModelStore(std::string home);
  // $TERN_HOME, else $XDG_CACHE_HOME/tern, else ~/.cache/tern.
  static std::string default_home();

  const std::string& home() const { return home_; }
  std::string models_directory() const;

  Result<std::vector<StoredModel>> list() const;
  Result<StoredModel> find(const std::string& name) const;
  // A store name, or a path to a .gguf file; errors name the models that are installed.
  Result<std::string> resolve_model_file(const std::string& name_or_path) const;
  // Copies (or hard-links when `link` and on the same file system) `files` into the store as
  // `name`; `described` comes from validating the file first.
  Result<StoredModel> add(const std::string& name, const std::vector<std::string>& files,
                          const ModelDescription& described, bool link) const;
  Result<void> remove(const std::string& name) const;

  static Result<void> check_name(const std::string& name);

 private:
  std::string home_;
};

}  // namespace tern
