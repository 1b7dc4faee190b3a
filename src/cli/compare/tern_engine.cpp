// Tern itself, through `tern bench --json` in a child process (one timed run after its warm-up),
// so that every engine loads the file from scratch the same way.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/compare/engine_factories.h"
#include "cli/compare/subprocess.h"

namespace tern::cli {
namespace {

class TernEngine : public CompareEngine {
 public:
  TernEngine(std::string tern, const CompareSetup& s) : tern_(std::move(tern)), s_(s) {}

  std::string name() const override { return "tern"; }
  std::string commands() const override { return fmt::format("{}", fmt::join(argv(), " ")); }

  Result<Measurement> measure(int) override {
    auto r = run_captured(argv(), {}, 3600);
    if (!r) return r.error();
    if (r->exit_status != 0) return make_error("tern bench failed: {}", r->err);
    const auto j = nlohmann::json::parse(r->out, nullptr, false);
    if (!j.is_object() || !j.contains("results") || j["results"].empty())
      return make_error("tern bench printed no results: {}", r->out.substr(0, 500));
    const auto& res = j["results"][0];
    return Measurement{res["prefill_tok_s"]["median"].get<double>(),
                       res["decode_tok_s"]["median"].get<double>()};
  }

 private:
  std::vector<std::string> argv() const {
    std::vector<std::string> a = {tern_,
                                  "bench",
                                  "-m",
                                  s_.model_file,
                                  "-p",
                                  std::to_string(s_.prompt_tokens),
                                  "-n",
                                  std::to_string(s_.gen_tokens),
                                  "-r",
                                  "1",
                                  "--json",
                                  "--device",
                                  s_.gpu ? "cuda" : "cpu"};
    if (s_.threads > 0) {
      a.push_back("--threads");
      a.push_back(std::to_string(s_.threads));
    }
    return a;
  }

  std::string tern_;
  CompareSetup s_;
};

}  // namespace

std::unique_ptr<CompareEngine> make_tern_engine(const std::string& tern, const CompareSetup& s) {
  return std::make_unique<TernEngine>(tern, s);
}

}  // namespace tern::cli
