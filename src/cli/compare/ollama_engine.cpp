// Ollama, when its CLI is installed: the file is registered as a model (`ollama create` from a
// Modelfile whose FROM is the GGUF path), then /api/generate runs a raw prompt of about P tokens
// with num_predict N; Ollama reports the counts and durations of prompt evaluation and of
// generation itself. A server at $OLLAMA_HOST (default 127.0.0.1:11434) is used, or `ollama
// serve` is started for the comparison and stopped after it.
#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/compare/engine_factories.h"
#include "cli/compare/subprocess.h"

namespace tern::cli {
namespace {

constexpr const char* kModelName = "tern-bench-compare";

class OllamaEngine : public CompareEngine {
 public:
  OllamaEngine(std::string binary, const CompareSetup& s) : bin_(std::move(binary)), s_(s) {
    std::string host = "127.0.0.1:11434";
    if (const char* h = std::getenv("OLLAMA_HOST"); h != nullptr && *h != '\0') host = h;
    if (host.rfind("http://", 0) == 0) host = host.substr(7);
    const size_t colon = host.rfind(':');
    host_ = host.substr(0, colon);
    port_ = colon == std::string::npos ? 11434 : std::atoi(host.c_str() + colon + 1);
  }

  std::string name() const override { return "ollama"; }
  std::string version() const override { return version_; }
  std::string commands() const override {
    return fmt::format(
        "ollama create {} -f Modelfile (FROM {})\nPOST /api/generate {{raw prompt of ~{} "
        "tokens, num_predict: {}}}",
        kModelName, s_.model_file, s_.prompt_tokens, s_.gen_tokens);
  }

  Result<void> prepare() override {
    httplib::Client c(host_, port_);
    c.set_connection_timeout(1);
    if (auto res = c.Get("/api/version"); !res || res->status != 200) {
      const std::string log = (std::filesystem::path(s_.work_dir) / "ollama-serve.log").string();
      auto p = BackgroundProcess::start({bin_, "serve"}, {}, log);
      if (!p) return p.error();
      server_ = std::move(*p);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!(res = c.Get("/api/version")) || res->status != 200) {
        if (!server_.running() || std::chrono::steady_clock::now() > deadline)
          return make_error("ollama serve did not start; its log ({}) ends:\n{}", log,
                            tail_of_file(log));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    if (auto res = c.Get("/api/version"); res && res->status == 200) {
      const auto j = nlohmann::json::parse(res->body, nullptr, false);
      if (j.is_object()) version_ = j.value("version", std::string());
    }
    const auto modelfile = std::filesystem::path(s_.work_dir) / "Modelfile";
    std::ofstream(modelfile) << "FROM " << s_.model_file << "\n";
    auto r = run_captured({bin_, "create", kModelName, "-f", modelfile.string()}, {}, 1800);
    if (!r) return r.error();
    if (r->exit_status != 0) return make_error("ollama create failed: {}{}", r->out, r->err);
    return {};
  }

  Result<Measurement> measure(int run) override {
    httplib::Client c(host_, port_);
    c.set_read_timeout(3600);
    // A different first word per run, so that no run reuses another's prompt cache.
    std::string prompt = fmt::format("Run {}:", run);
    for (int64_t i = 0; i < s_.prompt_tokens - 3; ++i) prompt += " the";
    nlohmann::json options = {{"num_predict", s_.gen_tokens},
                              {"num_ctx", s_.prompt_tokens + s_.gen_tokens + 64},
                              {"temperature", 0}};
    if (s_.threads > 0) options["num_thread"] = s_.threads;
    if (!s_.gpu) options["num_gpu"] = 0;
    const nlohmann::json body = {{"model", kModelName},
                                 {"prompt", prompt},
                                 {"raw", true},
                                 {"stream", false},
                                 {"options", options}};
    auto res = c.Post("/api/generate", body.dump(), "application/json");
    if (!res || res->status != 200)
      return make_error("ollama /api/generate failed: {}", res ? res->body.substr(0, 500) : "");
    const auto j = nlohmann::json::parse(res->body, nullptr, false);
    auto rate = [&](const char* count, const char* ns) {
      const double n = j.value(count, 0.0), d = j.value(ns, 0.0);
      return d > 0 ? n / (d * 1e-9) : 0.0;
    };
    return Measurement{rate("prompt_eval_count", "prompt_eval_duration"),
                       rate("eval_count", "eval_duration")};
  }

  void finish() override {
    (void)run_captured({bin_, "rm", kModelName}, {}, 120);
    server_.stop();
  }

 private:
  std::string bin_;
  CompareSetup s_;
  std::string host_;
  int port_ = 11434;
  std::string version_;
  BackgroundProcess server_;
};

}  // namespace

std::unique_ptr<CompareEngine> make_ollama_engine(const std::string& binary,
                                                  const CompareSetup& s) {
  return std::make_unique<OllamaEngine>(binary, s);
}

}  // namespace tern::cli
