// The `tern serve` behind a launched agent: reuse one that is already serving the model (its
// runtime record names a live pid whose /health answers), or start one in the background with
// its output in a log file, wait until it is ready, and stop it when the agent is done.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/agents/server_record.h"

namespace tern::cli {

struct ServeRequest {
  std::string home;                     // Tern home: run/ and logs/ live there
  std::string model;                    // --model argument
  std::string served_name;              // --served-name
  int port = 0;                         // 0: pick a free one
  std::vector<std::string> extra_args;  // more `tern serve` flags (--ctx, --threads, ...)
  double ready_timeout_s = 120;
};

struct LocalServer {
  ServerRecord record;
  bool started_here = false;  // only a server we started is stopped afterwards
  pid_t pid = 0;
};

// GET path on the server; the body when it answers 200 within `timeout_s`.
std::optional<std::string> http_get(const ServerRecord& server, const std::string& path,
                                    double timeout_s = 2.0);

// A live server for the model: a record whose pid exists and whose /health answers.
std::optional<ServerRecord> find_running_server(const std::string& home,
                                                const std::string& served_name);

// A port on 127.0.0.1 that nothing listens on right now.
Result<int> pick_free_port();

// Starts `tern serve` (this executable) and waits until it is ready. Errors say why, with the
// end of its log when it died or did not become ready in time.
Result<LocalServer> start_server(const ServeRequest& request);

// SIGTERM (SIGKILL after `grace_s`), waits for it, removes its record.
void stop_server(LocalServer& server, const std::string& home, double grace_s = 30);

}  // namespace tern::cli
