// llama.cpp, the reference peer, two ways: `llama-bench -o json` (prefill pp<P> from an empty
// context; decode tg<N> at depth P with -d, so it decodes with P tokens in the KV cache as Tern
// does), and `llama-server` (one /completion of P prompt token ids and N generated tokens, with
// the server's own timings). The libraries beside the binary are put on LD_LIBRARY_PATH, as a
// build tree leaves them.
#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/agents/local_server.h"
#include "cli/compare/engine_factories.h"
#include "cli/compare/subprocess.h"

namespace tern::cli {
namespace {

EnvironmentChanges library_path_for(const std::string& binary) {
  std::string dir = std::filesystem::path(binary).parent_path().string();
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0')
    dir += std::string(":") + old;
  return {{"LD_LIBRARY_PATH", dir}};
}

std::vector<std::string> gpu_flags(const CompareSetup& s) {
  if (s.gpu) return {"-ngl", "99", "-fa", "1"};
  return {"-ngl", "0"};
}

class LlamaBenchEngine : public CompareEngine {
 public:
  LlamaBenchEngine(std::string binary, const CompareSetup& s) : bin_(std::move(binary)), s_(s) {}

  std::string name() const override { return "llama.cpp (llama-bench)"; }
  std::string version() const override { return version_; }
  std::string commands() const override {
    return fmt::format("{}\n{}", fmt::join(argv(true), " "), fmt::join(argv(false), " "));
  }

  Result<Measurement> measure(int) override {
    auto pp = run(argv(true));
    if (!pp) return pp.error();
    auto tg = run(argv(false));
    if (!tg) return tg.error();
    return Measurement{*pp, *tg};
  }

 private:
  std::vector<std::string> argv(bool prefill) const {
    std::vector<std::string> a = {bin_, "-m", s_.model_file, "-r", "1", "-o", "json"};
    if (prefill) {
      a.insert(a.end(), {"-p", std::to_string(s_.prompt_tokens), "-n", "0"});
    } else {
      a.insert(a.end(), {"-p", "0", "-n", std::to_string(s_.gen_tokens), "-d",
                         std::to_string(s_.prompt_tokens)});
    }
    if (s_.threads > 0) a.insert(a.end(), {"-t", std::to_string(s_.threads)});
    for (auto& f : gpu_flags(s_)) a.push_back(f);
    return a;
  }

  Result<double> run(const std::vector<std::string>& a) {
    auto r = run_captured(a, library_path_for(bin_), 3600);
    if (!r) return r.error();
    if (r->exit_status != 0)
      return make_error("llama-bench exited with {}: {}", r->exit_status,
                        r->err.substr(r->err.size() > 800 ? r->err.size() - 800 : 0));
    const auto j = nlohmann::json::parse(r->out, nullptr, false);
    if (!j.is_array() || j.empty() || !j[0].contains("avg_ts"))
      return make_error("llama-bench printed no results: {}", r->out.substr(0, 500));
    if (version_.empty())
      version_ = fmt::format("build {} ({})", j[0].value("build_number", 0),
                             j[0].value("build_commit", std::string("?")));
    return j[0]["avg_ts"].get<double>();
  }

  std::string bin_;
  CompareSetup s_;
  std::string version_;
};

class LlamaServerEngine : public CompareEngine {
 public:
  LlamaServerEngine(std::string binary, const CompareSetup& s) : bin_(std::move(binary)), s_(s) {}

  std::string name() const override { return "llama.cpp (llama-server)"; }
  std::string version() const override { return version_; }
  std::string commands() const override {
    return fmt::format("{}\nPOST /completion {{prompt: {} token ids, n_predict: {}}}",
                       fmt::join(argv(), " "), s_.prompt_tokens, s_.gen_tokens);
  }

  Result<void> prepare() override {
    auto port = pick_free_port();
    if (!port) return port.error();
    port_ = *port;
    log_ = (std::filesystem::path(s_.work_dir) / "llama-server.log").string();
    auto p = BackgroundProcess::start(argv(), library_path_for(bin_), log_);
    if (!p) return p.error();
    server_ = std::move(*p);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(1);
    while (true) {
      if (!server_.running())
        return make_error("llama-server exited while loading; its log ({}) ends:\n{}", log_,
                          tail_of_file(log_));
      if (auto res = c.Get("/health"); res && res->status == 200) break;
      if (std::chrono::steady_clock::now() > deadline)
        return make_error("llama-server was not ready after 10 minutes; log: {}", log_);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (auto res = c.Get("/props"); res && res->status == 200) {
      const auto j = nlohmann::json::parse(res->body, nullptr, false);
      if (j.is_object()) version_ = j.value("build_info", std::string());
    }
    // P ordinary token ids: a text's tokens, repeated.
    auto tok = c.Post("/tokenize",
                      R"({"content": "The quick brown fox jumps over the lazy dog while the )"
                      R"(engineers measure how fast their language model reads and writes."})",
                      "application/json");
    if (!tok || tok->status != 200) return make_error("llama-server /tokenize failed");
    const auto ids = nlohmann::json::parse(tok->body, nullptr, false);
    if (!ids.is_object() || !ids.contains("tokens") || ids["tokens"].empty())
      return make_error("llama-server /tokenize returned no tokens");
    for (int64_t i = 0; i < s_.prompt_tokens; ++i)
      prompt_.push_back(ids["tokens"][static_cast<size_t>(i) % ids["tokens"].size()]);
    return {};
  }

  Result<Measurement> measure(int run) override {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(3600);
    nlohmann::json prompt = prompt_;
    prompt[0] = prompt_[static_cast<size_t>(run) % prompt_.size()];  // no reuse across runs
    const nlohmann::json body = {{"prompt", prompt},      {"n_predict", s_.gen_tokens},
                                 {"cache_prompt", false}, {"temperature", 0},
                                 {"ignore_eos", true},    {"stream", false}};
    auto res = c.Post("/completion", body.dump(), "application/json");
    if (!res) return make_error("llama-server did not answer /completion; log: {}", log_);
    if (res->status != 200)
      return make_error("llama-server /completion: HTTP {}: {}", res->status,
                        res->body.substr(0, 500));
    const auto j = nlohmann::json::parse(res->body, nullptr, false);
    if (!j.is_object() || !j.contains("timings"))
      return make_error("llama-server /completion returned no timings");
    const auto& t = j["timings"];
    return Measurement{t.value("prompt_per_second", 0.0), t.value("predicted_per_second", 0.0)};
  }

  void finish() override { server_.stop(); }

 private:
  std::vector<std::string> argv() const {
    std::vector<std::string> a = {bin_,
                                  "-m",
                                  s_.model_file,
                                  "--host",
                                  "127.0.0.1",
                                  "--port",
                                  std::to_string(port_),
                                  "-c",
                                  std::to_string(s_.prompt_tokens + s_.gen_tokens + 64),
                                  "-np",
                                  "1"};
    if (s_.threads > 0) a.insert(a.end(), {"-t", std::to_string(s_.threads)});
    if (s_.gpu) {
      a.insert(a.end(), {"-ngl", "99", "-fa", "on"});
    } else {
      a.insert(a.end(), {"-ngl", "0"});
    }
    return a;
  }

  std::string bin_;
  CompareSetup s_;
  int port_ = 0;
  std::string log_;
  std::string version_;
  BackgroundProcess server_;
  nlohmann::json prompt_ = nlohmann::json::array();
};

}  // namespace

std::unique_ptr<CompareEngine> make_llama_bench_engine(const std::string& binary,
                                                       const CompareSetup& s) {
  return std::make_unique<LlamaBenchEngine>(binary, s);
}

std::unique_ptr<CompareEngine> make_llama_server_engine(const std::string& binary,
                                                        const CompareSetup& s) {
  return std::make_unique<LlamaServerEngine>(binary, s);
}

}  // namespace tern::cli
