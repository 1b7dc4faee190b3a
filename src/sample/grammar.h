// A byte-level grammar for constrained decoding: JSON values shaped by a JSON schema, literal
// text and sequences (a tool call's markers around its JSON arguments), and free text. Compiled
// into nodes once; a GrammarMatcher walks bytes through it as a pushdown automaton (a set of
// stacks, one per live alternative of anyOf / enum / type lists).
//
// The JSON-schema subset: type (string, number, integer, boolean, null, object, array, or a
// list of them), properties, required, additionalProperties (false, a schema, or true), items,
// minItems/maxItems, minLength/maxLength, enum, const, anyOf/oneOf, allOf of one schema, $ref to
// #/$defs/... or #/definitions/... (recursion allowed). Ignored (not enforced): pattern, format,
// minimum/maximum, uniqueItems, patternProperties. An object that declares properties and says
// nothing about additionalProperties accepts only its declared keys (what strict clients and
// tool arguments mean in practice); an object schema without properties accepts any keys.
// Output JSON is compact or lightly spaced: at most kMaxSpaces whitespace bytes in a row.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace tern {

struct GrammarNode {
  enum class Kind : uint8_t { Literal, Sequence, Choice, Object, Array, String, Number, RawText };
  struct Property {
    std::string key;  // as written between the quotes (JSON-escaped)
    int32_t value = -1;
    bool required = false;
  };
  Kind kind = Kind::Literal;
  bool ws_before = false;            // Literal: whitespace may precede it (a JSON value)
  bool integer = false;              // Number: no fraction or exponent
  std::string text;                  // Literal: the bytes
  std::vector<int32_t> children;     // Sequence, Choice
  std::vector<Property> properties;  // Object (at most 64)
  int32_t additional = -1;           // Object: schema of other keys; -1: none allowed
  int32_t items = -1;                // Array
  int64_t min = 0, max = -1;         // Array items, String code points, RawText bytes (-1: any)
  std::string stop_bytes;            // RawText: bytes it may not contain
};

class Grammar {
 public:
  static constexpr int kMaxSpaces = 20;

  // A JSON value matching `schema` (an object, or true/{} for any JSON value).
  static Result<Grammar> from_json_schema(const nlohmann::json& schema);
  // Any JSON object (response_format json_object).
  static Grammar json_object();

  // Building blocks for formats around JSON (tool calls). Each returns the new node's index.
  int32_t literal(std::string text, bool ws_before = false);
  int32_t sequence(std::vector<int32_t> children);
  int32_t choice(std::vector<int32_t> children);
  int32_t raw_text(std::string stop_bytes, int64_t max_bytes);
  // The value of `schema` compiled into this grammar; `strict_objects`: see above.
  Result<int32_t> add_schema(const nlohmann::json& schema);
  int32_t any_value();
  void set_root(int32_t root) { root_ = root; }

  int32_t root() const { return root_; }
  const GrammarNode& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  size_t size() const { return nodes_.size(); }

 private:
  int32_t add(GrammarNode n);
  Result<int32_t> compile(const nlohmann::json& schema, int depth);
  Result<int32_t> compile_typed(const nlohmann::json& schema, const std::string& type, int depth);
  std::vector<GrammarNode> nodes_;
  int32_t root_ = -1;
  int32_t any_ = -1;
  const nlohmann::json* document_ = nullptr;           // for $ref during add_schema
  std::vector<std::pair<std::string, int32_t>> refs_;  // compiled $ref targets
};

// The automaton's state over a Grammar: feed bytes, ask whether the text may end here.
class GrammarMatcher {
 public:
  struct Frame {
    int32_t node = 0;
    int32_t child = -1;  // Object: the value node of the key just read
    int32_t count = 0;   // Literal bytes / Sequence child / Array items / String code points / ...
    int32_t key_len = 0;
    uint64_t seen = 0;  // Object: properties present
    uint64_t cand = 0;  // Object key: properties still matching
    uint16_t uval = 0;  // \u escape value
    uint8_t phase = 0;
    uint8_t esc = 0;               // string lexer: escape state
    uint8_t utf8 = 0;              // continuation bytes still expected
    uint8_t lo = 0x80, hi = 0xBF;  // the next continuation byte's range
    bool free_key = false;
  };
  struct Thread {
    std::vector<Frame> stack;
    int32_t spaces = 0;  // whitespace bytes in a row
  };
  struct State {
    std::vector<Thread> threads;
  };

  explicit GrammarMatcher(const Grammar& grammar);

  // False (and the matcher becomes dead) when the bytes cannot continue the text.
  bool feed(std::string_view bytes);
  bool dead() const { return state_.threads.empty(); }
  // The text so far is complete.
  bool can_end() const;
  const State& state() const { return state_; }
  void set_state(State s) { state_ = std::move(s); }

  // The state after byte `c` (out is overwritten). -1 is the end of the text.
  void advance(const State& in, int c, State& out) const;
  bool state_can_end(const State& s) const;
  // The state is one thread inside a plain JSON string (no pending escape or UTF-8 byte):
  // `count` code points so far, `max` allowed (-1: any). Used by the vocabulary fast path.
  bool in_plain_string(const State& s, int64_t& count, int64_t& max) const;

 private:
  void step(Thread& t, int c, std::vector<Thread>& out) const;
  void complete(Thread& t) const;
  bool push_value(Thread& t, int32_t node) const;
  const Grammar& g_;
  State state_;
};

}  // namespace tern
