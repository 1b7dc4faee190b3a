// `tern serve`: load a model and serve the OpenAI and Anthropic APIs until SIGINT/SIGTERM, then
// stop cleanly: open streams get their final event before the server closes.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "api/openai_common.h"
#include "api/service.h"
#include "cli/agents/server_record.h"
#include "cli/model_options.h"
#include "server/http_server.h"
#include "server/routes.h"

namespace tern::cli {

void add_serve_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over the OpenAI and Anthropic APIs");
  struct Args {
    ModelOptions model;
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string api_key;
    int64_t parallel = 4;
    std::string name;
    int64_t max_queue = 64;
    bool no_prefix_cache = false;
    bool log_requests = false;
    int64_t max_output = 0;
    float temperature = -1;
  };
  auto a = std::make_shared<Args>();
  a->model.add_to(*cmd, true);
  cmd->add_option("--host", a->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a->port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", a->api_key,
                  "Require this key (Authorization: Bearer or x-api-key); default: accept any");
  cmd->add_option("--parallel", a->parallel, "Requests decoded together")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--max-queue", a->max_queue, "Requests that may wait for a slot; more get 429")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache,
                "Do not keep finished requests' KV for reuse (for measuring what reuse saves)");
  cmd->add_option("--max-output", a->max_output,
                  "Cap on tokens generated per request; a request asking for more gets this many "
                  "(0: no cap beyond the context)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("--temp", a->temperature,
                  "Temperature for requests that set none (default: each API's own, 1.0)")
      ->check(CLI::Range(0.0f, 100.0f));
  cmd->add_flag("--log-requests", a->log_requests,
                "Log each request (route, status, streamed or not, time) and its token usage to "
                "stderr");
  cmd->add_option("--served-name", a->name,
                  "Model name reported by /v1/models (default: the model's name)");
  cmd->callback([&ctx, a] {
    if (a->model.follows()) {  // --tp: ranks other than 0 only run rank 0's forward passes
      ctx.exit_code = a->model.follow(ctx, a->parallel);
      return;
    }
    // Signals are taken by one thread with sigwait, so every other thread runs undisturbed.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    auto loaded = a->model.load(ctx, true, a->parallel);
    if (!loaded) {
      ctx.exit_code = report_error(loaded.error().message);
      return;
    }
    LoadedModel& m = **loaded;
    EngineOptions eo;
    eo.parallel = a->parallel;
    eo.max_queue = a->max_queue;
    eo.prefix_cache = !a->no_prefix_cache;
    eo.max_output = a->max_output;
    Engine engine(m, eo);
    if (a->log_requests) {
      engine.set_finish_observer([](const Usage& u, FinishReason finish) {
        fmt::print(stderr, "  usage: {} prompt tokens ({} cached), {} generated, finish {}\n",
                   u.prompt_tokens, u.cached_tokens, u.completion_tokens,
                   api::openai_finish_reason(finish));
      });
    }
    api::ServiceInfo info;
    info.model_name = a->name.empty() ? a->model.model : a->name;
    if (info.model_name.find('/') != std::string::npos)
      info.model_name = m.info.name.empty() ? "tern" : m.info.name;
    // Clients may name the model as it was given, by its file's stem or by its GGUF name.
    info.aliases = {a->model.model, std::filesystem::path(m.path).stem().string(), m.info.name};
    info.created = api::unix_time();
    if (a->temperature >= 0) info.default_temperature = a->temperature;
    api::Service service(engine, info);
    server::ServerOptions so;
    so.host = a->host;
    so.port = a->port;
    so.api_key = a->api_key;
    so.log_requests = a->log_requests;
    so.threads = static_cast<size_t>(a->parallel) * 4 + 8;
    server::HttpServer http(so);
    server::register_routes(http, service);
    if (auto ok = http.bind(); !ok) {
      ctx.exit_code = report_error(ok.error().message);
      return;
    }
    const std::string url = fmt::format("http://{}:{}", a->host, http.port());
    fmt::print("Tern is serving {} ({} {}, {} tokens of context, {} parallel) at {}/v1\n",
               info.model_name, m.info.architecture, m.info.quantization, m.context, a->parallel,
               url);
    fmt::print(
        "Try it:\n  curl {}/v1/chat/completions -H 'Content-Type: application/json' "
        "-d '{{\"model\": \"{}\", \"messages\": [{{\"role\": \"user\", \"content\": "
        "\"Hello!\"}}]}}'\n",
        url, info.model_name);
    std::fflush(stdout);
    // The runtime record lets `tern claude` and the other launchers find and reuse this server.
    ServerRecord record;
    record.pid = static_cast<int>(getpid());
    record.host = a->host == "0.0.0.0" ? "127.0.0.1" : a->host;
    record.port = http.port();
    record.model = a->model.model;
    record.served_name = info.model_name;
    record.context = m.context;
    record.max_output = a->max_output;
    if (auto written = write_record(ctx.global.home, record); !written) {
      fmt::print(stderr, "warning: {}\n", written.error().message);
    }
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      fmt::print(stderr, "\nstopping (signal {})...\n", sig);
      engine.shutdown();  // open streams end with their final event
      http.stop();
    });
    http.serve();
    // serve() also returns if the server failed; make sure the waiter can finish.
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    remove_record(ctx.global.home, record.served_name, record.pid);
  });
}

}  // namespace tern::cli
