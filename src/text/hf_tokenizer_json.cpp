// Tokenizer::from_hf_json: a Hugging Face tokenizer.json (BPE model) and, beside it, its
// tokenizer_config.json.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "text/tokenizer.h"
#include "text/tokenizer_parts.h"

namespace tern {

using json = nlohmann::json;
using text::TokenizerParts;

namespace {

Result<json> read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("tokenizer: cannot open {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  json doc = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error("tokenizer: {} is not valid JSON", path);
  return doc;
}

std::string str_or(const json& j, const char* key, std::string fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool bool_or(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// {"String": s} or {"Regex": r} -> Regex.
Result<text::Regex> pattern_of(const json& j, const std::string& where) {
  if (j.contains("Regex")) return text::Regex::compile(j["Regex"].get<std::string>());
  if (j.contains("String")) return text::Regex::compile(j["String"].get<std::string>(), true);
  return make_error("tokenizer: {}: pattern is neither String nor Regex", where);
}

Result<void> add_normalizer(const json& j, text::Normalizer& out, const std::string& path) {
  if (j.is_null()) return ok_result();
  const std::string type = str_or(j, "type", "");
  if (type == "Sequence") {
    for (const auto& n : j["normalizers"]) TERN_TRY(add_normalizer(n, out, path));
    return ok_result();
  }
  if (type == "Replace") {
    const json& pat = j["pattern"];
    if (!pat.contains("String"))
      return make_error("tokenizer: {}: Replace normalizer with a regex is not supported", path);
    out.add(
        text::ReplaceNormalizer{pat["String"].get<std::string>(), j["content"].get<std::string>()});
    return ok_result();
  }
  if (type == "Prepend") {
    out.add(text::PrependNormalizer{j["prepend"].get<std::string>()});
    return ok_result();
  }
  if (type == "NFC") {
    if (!text::Normalizer::nfc_supported())
      return make_error("tokenizer: {}: NFC normalizer needs ICU, which this build lacks", path);
    out.add(text::NfcNormalizer{});
    return ok_result();
  }
  return make_error("tokenizer: {}: normalizer '{}' is not supported", path, type);
}

Result<text::PrependScheme> prepend_scheme(const json& j) {
  if (j.contains("prepend_scheme")) {
    const std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "always") return text::PrependScheme::Always;
    if (s == "first") return text::PrependScheme::First;
    if (s == "never") return text::PrependScheme::Never;
    return make_error("tokenizer: Metaspace prepend_scheme '{}' is unknown", s);
  }
  return bool_or(j, "add_prefix_space", true) ? text::PrependScheme::Always
                                              : text::PrependScheme::Never;
}

Result<void> add_pretokenizer(const json& j, text::PreTokenizer& out, const std::string& path) {
  if (j.is_null()) return ok_result();
  const std::string type = str_or(j, "type", "");
  if (type == "Sequence") {
    for (const auto& n : j["pretokenizers"]) TERN_TRY(add_pretokenizer(n, out, path));
    return ok_result();
  }
  if (type == "ByteLevel") {
    out.add(
        text::ByteLevelStep{bool_or(j, "add_prefix_space", false), bool_or(j, "use_regex", true)});
    return ok_result();
  }
  if (type == "Digits") {
    auto step = text::digits_step(bool_or(j, "individual_digits", false));
    if (!step) return step.error();
    out.add(std::move(step.value()));
    return ok_result();
  }
  if (type == "Split") {
    if (bool_or(j, "invert", false))
      return make_error("tokenizer: {}: Split with invert=true is not supported", path);
    auto re = pattern_of(j["pattern"], path);
    if (!re) return re.error();
    const std::string behavior = str_or(j, "behavior", "Isolated");
    text::SplitBehavior b;
    if (behavior == "Isolated")
      b = text::SplitBehavior::Isolated;
    else if (behavior == "Removed")
      b = text::SplitBehavior::Removed;
    else if (behavior == "MergedWithPrevious")
      b = text::SplitBehavior::MergedWithPrevious;
    else if (behavior == "MergedWithNext")
      b = text::SplitBehavior::MergedWithNext;
    else
      return make_error("tokenizer: {}: Split behavior '{}' is not supported", path, behavior);
    out.add(text::SplitStep{std::move(re.value()), b});
    return ok_result();
  }
  if (type == "Metaspace") {
    auto scheme = prepend_scheme(j);
    if (!scheme) return scheme.error();
    out.add(text::MetaspaceStep{str_or(j, "replacement", "\xE2\x96\x81"), scheme.value(),
                                bool_or(j, "split", true)});
    return ok_result();
  }
  return make_error("tokenizer: {}: pre-tokenizer '{}' is not supported", path, type);
}

// Walks the decoder: byte-level or SentencePiece spelling, and whether a leading space is dropped.
void read_decoder(const json& j, bool& byte_level, bool& strip_space) {
  if (j.is_null()) return;
  const std::string type = str_or(j, "type", "");
  if (type == "Sequence") {
    for (const auto& d : j["decoders"]) read_decoder(d, byte_level, strip_space);
  } else if (type == "ByteLevel") {
    byte_level = true;
  } else if (type == "Strip") {
    if (str_or(j, "content", "") == " " && j.value("start", 0) >= 1) strip_space = true;
  } else if (type == "Metaspace") {
    auto scheme = prepend_scheme(j);
    if (scheme && scheme.value() != text::PrependScheme::Never) strip_space = true;
  }
}

// TemplateProcessing: a special token before $A is BOS, one after it EOS.
void read_post_processor(const json& j, const text::Vocab& ids, TokenizerParts& p) {
  if (j.is_null()) return;
  const std::string type = str_or(j, "type", "");
  if (type == "Sequence") {
    for (const auto& q : j["processors"]) read_post_processor(q, ids, p);
    return;
  }
  if (type != "TemplateProcessing" || !j.contains("single")) return;
  bool seen_sequence = false;
  for (const auto& item : j["single"]) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      const auto it = ids.find(name);
      if (it == ids.end()) continue;
      if (!seen_sequence) {
        p.bos = it->second;
        p.add_bos = true;
      } else {
        p.eos = it->second;
        p.add_eos = true;
      }
    }
  }
}

std::optional<std::string> token_name(const json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return (*it)["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json(const std::string& path) {
  auto doc_r = read_json(path);
  if (!doc_r) return doc_r.error();
  const json& doc = doc_r.value();
  if (!doc.contains("model") || !doc["model"].is_object())
    return make_error("tokenizer: {} has no \"model\" object", path);
  const json& model = doc["model"];
  const std::string type = str_or(model, "type", "BPE");
  if (type != "BPE")
    return make_error("tokenizer: {}: model type '{}' is not supported (only BPE)", path, type);
  if (!str_or(model, "continuing_subword_prefix", "").empty() ||
      !str_or(model, "end_of_word_suffix", "").empty())
    return make_error("tokenizer: {}: BPE with a subword prefix or word suffix is not supported",
                      path);

  auto p = std::make_unique<TokenizerParts>();
  text::Vocab vocab;
  int32_t max_id = -1;
  for (const auto& [tok, id] : model["vocab"].items()) {
    const auto i = id.get<int32_t>();
    vocab.insert_or_assign(tok, i);
    max_id = std::max(max_id, i);
  }
  std::vector<text::AddedToken> added;
  if (doc.contains("added_tokens")) {
    for (const auto& a : doc["added_tokens"]) {
      text::AddedToken t;
      t.content = a["content"].get<std::string>();
      t.id = a["id"].get<int32_t>();
      t.special = bool_or(a, "special", false);
      t.lstrip = bool_or(a, "lstrip", false);
      t.rstrip = bool_or(a, "rstrip", false);
      max_id = std::max(max_id, t.id);
      added.push_back(std::move(t));
    }
  }
  if (max_id < 0) return make_error("tokenizer: {}: empty vocabulary", path);
  p->tokens.assign(static_cast<size_t>(max_id) + 1, std::string());
  p->special.assign(p->tokens.size(), 0);
  for (const auto& [tok, id] : vocab) p->tokens[static_cast<size_t>(id)] = tok;
  for (const auto& a : added) {
    p->tokens[static_cast<size_t>(a.id)] = a.content;
    if (a.special) p->special[static_cast<size_t>(a.id)] = 1;
  }

  std::vector<std::pair<std::string, std::string>> merges;
  if (model.contains("merges")) {
    merges.reserve(model["merges"].size());
    for (const auto& m : model["merges"]) {
      if (m.is_array() && m.size() == 2) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos)
          return make_error("tokenizer: {}: merge '{}' has no space", path, s);
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        return make_error("tokenizer: {}: a merge is neither \"a b\" nor [a, b]", path);
      }
    }
  }

  TERN_TRY(add_normalizer(doc.value("normalizer", json()), p->normalizer, path));
  TERN_TRY(add_pretokenizer(doc.value("pre_tokenizer", json()), p->pretokenizer, path));
  bool byte_level = p->pretokenizer.has_byte_level();
  bool strip_space = false;
  read_decoder(doc.value("decoder", json()), byte_level, strip_space);
  p->kind = byte_level ? text::TokenizerKind::ByteLevelBpe : text::TokenizerKind::SentencePieceBpe;
  p->strip_leading_space = strip_space;

  text::Vocab all_ids = vocab;
  for (const auto& a : added) all_ids.insert_or_assign(a.content, a.id);
  read_post_processor(doc.value("post_processor", json()), all_ids, *p);

  // tokenizer_config.json beside it: bos/eos names and add_bos_token/add_eos_token.
  const auto cfg_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(cfg_path)) {
    auto cfg_r = read_json(cfg_path.string());
    if (!cfg_r) return cfg_r.error();
    const json& cfg = cfg_r.value();
    const auto lookup = [&](const char* key) -> std::optional<int32_t> {
      const auto name = token_name(cfg, key);
      if (!name) return std::nullopt;
      const auto it = all_ids.find(*name);
      return it == all_ids.end() ? std::nullopt : std::optional<int32_t>(it->second);
    };
    if (auto id = lookup("bos_token")) p->bos = id;
    if (auto id = lookup("eos_token")) p->eos = id;
    if (auto id = lookup("eot_token")) p->eot = id;
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      p->add_bos = cfg["add_bos_token"].get<bool>();
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean())
      p->add_eos = cfg["add_eos_token"].get<bool>();
  }

  text::BpeOptions opts;
  opts.byte_fallback = bool_or(model, "byte_fallback", false);
  opts.fuse_unk = bool_or(model, "fuse_unk", false);
  opts.ignore_merges = bool_or(model, "ignore_merges", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const auto it = vocab.find(model["unk_token"].get<std::string>());
    if (it != vocab.end()) opts.unk_id = it->second;
  }
  p->bpe = std::make_unique<text::BpeModel>(std::move(vocab), merges, opts);
  p->added.build(std::move(added));
  text::finish_parts(*p);
  return std::make_unique<Tokenizer>(std::move(p));
}

}  // namespace tern
