#include "cli/agents/server_record.h"

#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/mapped_file.h"

namespace tern::cli {

using nlohmann::json;

std::string ServerRecord::base_url() const {
  return fmt::format("http://{}:{}", host, port);
}

std::string record_key(const std::string& served_name) {
  std::string key;
  for (char c : served_name) {
    const bool safe = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
    key += safe ? c : '_';
  }
  return key.empty() ? "model" : key;
}

std::string record_path(const std::string& home, const std::string& served_name) {
  return (std::filesystem::path(home) / "run" / ("serve-" + record_key(served_name) + ".json"))
      .string();
}

Result<void> write_record(const std::string& home, const ServerRecord& r) {
  const std::string path = record_path(home, r.served_name);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return make_error("cannot create {}: {}", path, ec.message());
  const std::string text = json{{"pid", r.pid},
                                {"host", r.host},
                                {"port", r.port},
                                {"model", r.model},
                                {"served_name", r.served_name},
                                {"context", r.context},
                                {"max_output", r.max_output},
                                {"log", r.log}}
                               .dump(2) +
                           "\n";
  return write_file_atomically(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

std::optional<ServerRecord> read_record(const std::string& home, const std::string& served_name) {
  std::ifstream in(record_path(home, served_name));
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    ServerRecord r;
    r.pid = j.at("pid").get<int>();
    r.host = j.value("host", "127.0.0.1");
    r.port = j.at("port").get<int>();
    r.model = j.value("model", "");
    r.served_name = j.value("served_name", served_name);
    r.context = j.value("context", int64_t{0});
    r.max_output = j.value("max_output", int64_t{0});
    r.log = j.value("log", "");
    if (r.pid <= 0 || r.port <= 0) return std::nullopt;
    return r;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

void remove_record(const std::string& home, const std::string& served_name, int pid) {
  auto r = read_record(home, served_name);
  if (r && r->pid != pid) return;
  std::error_code ec;
  std::filesystem::remove(record_path(home, served_name), ec);
}

}  // namespace tern::cli
