// The runtime record a running `tern serve` leaves in $TERN_HOME/run/serve-<name>.json (pid,
// port, model), so that `tern claude` and the other launchers find a server for their model and
// reuse it instead of loading the model a second time.
#pragma once

#include <optional>
#include <string>

#include "base/error.h"

namespace tern::cli {

struct ServerRecord {
  int pid = 0;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string model;        // the --model argument it was started with
  std::string served_name;  // what /v1/models lists
  int64_t context = 0;      // tokens per sequence
  int64_t max_output = 0;   // its --max-output cap on generated tokens (0: none)
  std::string log;          // its log file, when a launcher started it

  std::string base_url() const;  // http://host:port (no /v1)
};

// A file-name-safe key for a served model name ("smollm2-135m", "My Model" -> "My_Model").
std::string record_key(const std::string& served_name);
std::string record_path(const std::string& home, const std::string& served_name);

// Written to a temp name and renamed, so a reader never sees half a record.
Result<void> write_record(const std::string& home, const ServerRecord& record);
// Nothing when there is no record or it does not parse.
std::optional<ServerRecord> read_record(const std::string& home, const std::string& served_name);
// Removes the record only if it still names `pid` (a newer server may have replaced it).
void remove_record(const std::string& home, const std::string& served_name, int pid);

}  // namespace tern::cli
