#include "text/pretokenizer.h"

#include <array>
#include <utility>

#include "text/byte_level.h"

namespace tern::text {

namespace patterns {
const char* const kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}  // namespace patterns

namespace {

const Regex& gpt2_regex() {
  static const Regex re = Regex::compile(patterns::kGpt2).value();
  return re;
}

void split_pieces(const Regex& re, SplitBehavior behavior, const std::string& s,
                  std::vector<std::string>& out) {
  std::vector<std::pair<size_t, size_t>> matches;
  re.find_all(s, matches);
  size_t pos = 0;
  std::string pending;  // MergedWithNext: a match waiting for the gap after it
  for (const auto& [b, e] : matches) {
    std::string gap = s.substr(pos, b - pos);
    std::string match = s.substr(b, e - b);
    switch (behavior) {
      case SplitBehavior::Isolated:
        if (!gap.empty()) out.push_back(std::move(gap));
        out.push_back(std::move(match));
        break;
      case SplitBehavior::Removed:
        if (!gap.empty()) out.push_back(std::move(gap));
        break;
      case SplitBehavior::MergedWithPrevious:
        out.push_back(gap + match);
        break;
      case SplitBehavior::MergedWithNext:
        pending += gap;
        if (!pending.empty()) out.push_back(std::move(pending));
        pending = std::move(match);
        break;
    }
    pos = e;
  }
  std::string tail = s.substr(pos);
  if (behavior == SplitBehavior::MergedWithNext) tail = pending + tail;
  if (!tail.empty()) out.push_back(std::move(tail));
}

}  // namespace

bool PreTokenizer::has_byte_level() const {
  for (const auto& s : steps_)
    if (std::holds_alternative<ByteLevelStep>(s)) return true;
  return false;
}

void PreTokenizer::apply(std::string_view s, bool first_segment,
                         std::vector<std::string>& pieces) const {
  std::vector<std::string> cur;
  cur.emplace_back(s);
  std::vector<std::string> next;
  for (const auto& step : steps_) {
    next.clear();
    if (const auto* split = std::get_if<SplitStep>(&step)) {
      for (const auto& p : cur) split_pieces(split->regex, split->behavior, p, next);
    } else if (const auto* bl = std::get_if<ByteLevelStep>(&step)) {
      for (auto& p : cur) {
        if (bl->add_prefix_space && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
        if (bl->use_regex) {
          std::vector<std::string> parts;
          split_pieces(gpt2_regex(), SplitBehavior::Isolated, p, parts);
          for (auto& part : parts) next.push_back(to_byte_level(part));
        } else {
          next.push_back(to_byte_level(p));
        }
      }
    } else {
      const auto& ms = std::get<MetaspaceStep>(step);
      for (size_t i = 0; i < cur.size(); ++i) {
        std::string t;
        for (char c : cur[i]) {
          if (c == ' ')
            t += ms.replacement;
          else
            t.push_back(c);
        }
        const bool prepend = ms.prepend == PrependScheme::Always ||
                             (ms.prepend == PrependScheme::First && first_segment && i == 0);
        if (prepend && t.compare(0, ms.replacement.size(), ms.replacement) != 0)
          t = ms.replacement + t;
        if (!ms.split) {
          next.push_back(std::move(t));
          continue;
        }
        size_t start = 0;
        for (size_t pos = t.find(ms.replacement, 1); pos != std::string::npos;
             pos = t.find(ms.replacement, pos + 1)) {
          next.push_back(t.substr(start, pos - start));
          start = pos;
        }
        if (start < t.size()) next.push_back(t.substr(start));
      }
    }
    std::swap(cur, next);
  }
  for (auto& p : cur)
    if (!p.empty()) pieces.push_back(std::move(p));
}

Result<SplitStep> digits_step(bool individual) {
  auto re = Regex::compile(individual ? R"(\p{N})" : R"(\p{N}+)");
  if (!re) return re.error();
  return SplitStep{std::move(re.value()), SplitBehavior::Isolated};
}

Result<PreTokenizer> byte_level_pretokenizer_for(std::string_view name) {
  struct Family {
    const char* name;
    const char* pattern;  // nullptr: GPT-2's regex inside ByteLevel
  };
  static constexpr std::array kFamilies = {
      Family{"default", nullptr},
      Family{"gpt2", nullptr},
      Family{"gpt-2", nullptr},
      Family{"smollm", nullptr},
      Family{"llama3", patterns::kLlama3},
      Family{"llama-v3", patterns::kLlama3},
      Family{"llama-bpe", patterns::kLlama3},
      Family{"falcon3", patterns::kLlama3},
      Family{"falcon-h1", patterns::kLlama3},
      Family{"pixtral", patterns::kLlama3},
      Family{"midm-2.0", patterns::kLlama3},
      Family{"lfm2", patterns::kLlama3},
      Family{"dbrx", patterns::kLlama3},
      Family{"smaug-bpe", patterns::kLlama3},
      Family{"tekken", patterns::kTekken},
      Family{"qwen2", patterns::kQwen2},
      Family{"deepseek-r1-qwen", patterns::kQwen2},
      Family{"megrez", patterns::kQwen2},
      Family{"qwen35", patterns::kQwen35},
      Family{"gpt-4o", patterns::kGpt4o},
      Family{"llama4", patterns::kGpt4o},
      Family{"minimax-m2", patterns::kGpt4o},
  };
  for (const auto& f : kFamilies) {
    if (name != f.name) continue;
    PreTokenizer pt;
    if (f.pattern == nullptr) {
      if (name == "smollm") {
        // SmolLM's own tokenizer isolates every digit before the GPT-2 regex.
        auto digits = digits_step(true);
        if (!digits) return digits.error();
        pt.add(std::move(digits.value()));
      }
      pt.add(ByteLevelStep{false, true});
      return pt;
    }
    auto re = Regex::compile(f.pattern);
    if (!re) return re.error();
    pt.add(SplitStep{std::move(re.value()), SplitBehavior::Isolated});
    pt.add(ByteLevelStep{false, false});
    return pt;
  }
  return make_error(
      "unsupported byte-level pre-tokenizer '{}' (tokenizer.ggml.pre); known: default, gpt2, "
      "smollm, "
      "llama-bpe/llama3, qwen2, qwen35, tekken, gpt-4o, ...; load the model's tokenizer.json "
      "instead",
      name);
}

}  // namespace tern::text
