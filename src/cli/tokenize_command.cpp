// `tern tokenize` and `tern detokenize`: a model's tokenizer from the command line.
#include <fmt/format.h>

#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/model_options.h"

namespace tern::cli {
namespace {

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

}  // namespace

void add_tokenize_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (stdin when no TEXT)");
  struct Args {
    std::string model = kDefaultModel;
    std::string text;
    bool json = false;
    bool no_special = false;
    bool plain_specials = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-m,--model", a->model, "Model name or .gguf path")->capture_default_str();
  cmd->add_option("text", a->text, "Text to tokenize (default: read stdin)");
  cmd->add_flag("--json", a->json, "Print [{\"id\", \"text\"}, ...]");
  cmd->add_flag("--no-special", a->no_special, "Do not add BOS/EOS the model adds by default");
  cmd->add_flag("--plain-specials", a->plain_specials,
                "Tokenize special-token text like any other text");
  cmd->callback([&ctx, a, cmd] {
    auto tok = load_tokenizer(ctx, a->model);
    if (!tok) {
      ctx.exit_code = report_error(tok.error().message);
      return;
    }
    std::string text = cmd->count("text") ? a->text : read_stdin();
    auto ids = (*tok)->encode(text, !a->no_special, !a->plain_specials);
    if (a->json) {
      nlohmann::json out = nlohmann::json::array();
      for (int32_t id : ids)
        out.push_back({{"id", id}, {"text", std::string((*tok)->token_text(id))}});
      fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      fmt::print("{}\n", fmt::join(ids, " "));
    }
  });
}

void add_detokenize_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("detokenize", "Print the text of token ids (stdin when no IDS)");
  struct Args {
    std::string model = kDefaultModel;
    std::vector<std::string> ids;
    bool skip_special = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-m,--model", a->model, "Model name or .gguf path")->capture_default_str();
  cmd->add_option("ids", a->ids,
                  "Token ids (default: read whitespace- or comma-separated ids from stdin)");
  cmd->add_flag("--skip-special", a->skip_special, "Leave out special tokens");
  cmd->callback([&ctx, a] {
    auto tok = load_tokenizer(ctx, a->model);
    if (!tok) {
      ctx.exit_code = report_error(tok.error().message);
      return;
    }
    std::vector<std::string> words = a->ids;
    if (words.empty()) {
      std::string in = read_stdin();
      for (char& c : in) {
        if (c == ',' || c == '[' || c == ']') c = ' ';
      }
      std::istringstream stream(in);
      for (std::string w; stream >> w;) words.push_back(w);
    }
    std::vector<int32_t> ids;
    for (const auto& w : words) {
      char* end = nullptr;
      long v = std::strtol(w.c_str(), &end, 10);
      if (end == w.c_str() || *end != '\0' || v < 0 ||
          v >= static_cast<long>((*tok)->vocab_size())) {
        ctx.exit_code = report_error(
            fmt::format("'{}' is not a token id (vocabulary has {})", w, (*tok)->vocab_size()));
        return;
      }
      ids.push_back(static_cast<int32_t>(v));
    }
    fmt::print("{}\n", (*tok)->decode(ids, a->skip_special));
  });
}

}  // namespace tern::cli
