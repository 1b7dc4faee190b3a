// Tokenizer: template text and tags, with jinja2's whitespace control as transformers sets it up
// (trim_blocks=True, lstrip_blocks=True), newlines normalized to "\n" and one trailing newline
// dropped (keep_trailing_newline=False).
#include <algorithm>
#include <cctype>
#include <cstring>

#include "text/jinja/internal.h"

namespace tern::jinja {

void fail_at(Location loc, const std::string& message) {
  throw TemplateError("line " + std::to_string(loc.line) + ", column " +
                          std::to_string(loc.column) + ": " + message,
                      true);
}

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      size_t start = find_tag(pos);
      if (start == std::string::npos) {
        emit_text(src_.substr(pos), pos);
        break;
      }
      char kind = src_[start + 1];
      char sign = start + 2 < n && (src_[start + 2] == '-' || src_[start + 2] == '+')
                      ? src_[start + 2]
                      : '\0';
      std::string text = src_.substr(pos, start - pos);
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(l_pos), text.end(), is_space)) {
          text.resize(l_pos);
        }
      }
      emit_text(std::move(text), pos);
      size_t p = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        size_t end = src_.find("#}", p);
        if (end == std::string::npos) fail_at(loc(start), "unterminated comment");
        char end_sign =
            end > p && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
        pos = after_block_end(end + 2, end_sign, true);
      } else if (kind == '%' && is_raw_begin(p)) {
        pos = lex_raw(start, p);
      } else {
        pos = lex_tag(start, p, kind == '%');
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Token end;
    end.kind = TokenKind::kEnd;
    end.loc = loc(n);
    tokens_.push_back(std::move(end));
    return std::move(tokens_);
  }

 private:
  Location loc(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    auto line = static_cast<size_t>(it - line_starts_.begin());
    size_t col = offset - line_starts_[line - 1];
    // Columns count code points, 1-based.
    return {
        static_cast<int>(line),
        static_cast<int>(utf8_length(std::string_view(src_).substr(line_starts_[line - 1], col))) +
            1};
  }

  size_t find_tag(size_t pos) const {
    while (true) {
      size_t i = src_.find('{', pos);
      if (i == std::string::npos || i + 1 >= src_.size()) return std::string::npos;
      char c = src_[i + 1];
      if (c == '{' || c == '%' || c == '#') return i;
      pos = i + 1;
    }
  }

  void emit_text(std::string text, size_t offset) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.text = std::move(text);
    t.loc = loc(offset);
    tokens_.push_back(std::move(t));
  }

  void emit(TokenKind kind, std::string text, size_t offset) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.loc = loc(offset);
    tokens_.push_back(std::move(t));
  }

  // Position after a block/comment end at `p` (just past "%}"/"#}"/"}}"): '-' eats all following
  // whitespace, trim_blocks eats one newline after a block or comment end.
  size_t after_block_end(size_t p, char sign, bool trim) const {
    if (sign == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (sign != '+' && trim && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  bool is_raw_begin(size_t p) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (p < src_.size() && src_[p] == '-') ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  size_t lex_raw(size_t start, size_t p) {
    size_t close = src_.find("%}", p);
    bool strip_after = src_[close - 1] == '-';
    size_t body = close + 2;
    if (strip_after) {
      while (body < src_.size() && is_space(src_[body])) ++body;
    }
    size_t search = body;
    while (true) {
      size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) fail_at(loc(start), "missing endraw for this raw block");
      size_t q = tag + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = tag + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      char end_sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (end_sign) ++q;
      if (src_.compare(q, 2, "%}") != 0) fail_at(loc(tag), "malformed endraw tag");
      std::string text = src_.substr(body, tag - body);
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      }
      emit_text(std::move(text), body);
      return after_block_end(q + 2, end_sign, true);
    }
  }

  size_t lex_tag(size_t start, size_t p, bool block) {
    emit(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", start);
    std::vector<char> balance;
    const size_t n = src_.size();
    while (true) {
      while (p < n && is_space(src_[p])) ++p;
      if (p >= n)
        fail_at(loc(start), block ? "unclosed tag: expected '%}'" : "unclosed '{{': expected '}}'");
      if (balance.empty()) {
        const char* end = block ? "%}" : "}}";
        char sign = (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
        size_t q = sign ? p + 1 : p;
        if (src_.compare(q, 2, end) == 0 && (block || sign != '+')) {
          emit(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", p);
          return after_block_end(q + 2, sign, block);
        }
      }
      char c = src_[p];
      if (is_name_start(c)) {
        size_t b = p;
        while (p < n && is_name_char(src_[p])) ++p;
        emit(TokenKind::kName, src_.substr(b, p - b), b);
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*",
                                     "/",  "%",  "~",  "<",  ">",  "=",  ".", ",", ":",
                                     "|",  "(",  ")",  "[",  "]",  "{",  "}"};
        const char* op = nullptr;
        for (const char* candidate : kOps) {
          if (src_.compare(p, std::strlen(candidate), candidate) == 0) {
            op = candidate;
            break;
          }
        }
        if (!op) fail_at(loc(p), std::string("unexpected character '") + c + "'");
        std::string o(op);
        if (o == "(" || o == "[" || o == "{") balance.push_back(c);
        if (o == ")" || o == "]" || o == "}") {
          char want = c == ')' ? '(' : c == ']' ? '[' : '{';
          if (balance.empty() || balance.back() != want) fail_at(loc(p), "unexpected '" + o + "'");
          balance.pop_back();
        }
        emit(TokenKind::kOp, o, p);
        p += o.size();
      }
    }
  }

  size_t lex_number(size_t p) {
    size_t b = p;
    const size_t n = src_.size();
    auto digits = [&] {
      while (p < n && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < n && is_digit(src_[p + 1]))))
        ++p;
    };
    digits();
    bool is_float = false;
    bool after_dot =
        !tokens_.empty() && tokens_.back().kind == TokenKind::kOp && tokens_.back().text == ".";
    if (!after_dot && p + 1 < n && src_[p] == '.' && is_digit(src_[p + 1])) {
      is_float = true;
      ++p;
      digits();
    }
    if (!after_dot && p < n && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < n && is_digit(src_[q])) {
        is_float = true;
        p = q;
        digits();
      }
    }
    std::string text;
    for (size_t i = b; i < p; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t;
    t.loc = loc(b);
    t.text = text;
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::stod(text);
    } else {
      t.kind = TokenKind::kInt;
      try {
        t.int_value = std::stoll(text);
      } catch (const std::exception&) {
        fail_at(t.loc, "integer literal out of range: " + text);
      }
    }
    tokens_.push_back(std::move(t));
    return p;
  }

  size_t lex_string(size_t p) {
    size_t b = p;
    char quote = src_[p++];
    std::string out;
    const size_t n = src_.size();
    auto hex = [&](size_t count) -> uint32_t {
      uint32_t v = 0;
      for (size_t i = 0; i < count; ++i) {
        if (p >= n || !std::isxdigit(static_cast<unsigned char>(src_[p]))) {
          fail_at(loc(p), "malformed \\x/\\u escape in string literal");
        }
        char h = src_[p++];
        v = v * 16 + static_cast<uint32_t>(is_digit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      return v;
    };
    while (true) {
      if (p >= n) fail_at(loc(b), "unterminated string literal");
      char c = src_[p];
      if (c == quote) {
        ++p;
        break;
      }
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      if (p + 1 >= n) fail_at(loc(b), "unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
          append_utf8(out, hex(2));
          break;
        case 'u':
          append_utf8(out, hex(4));
          break;
        case 'U':
          append_utf8(out, hex(8));
          break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && p < n && src_[p] >= '0' && src_[p] <= '7'; ++i) {
              v = v * 8 + static_cast<uint32_t>(src_[p++] - '0');
            }
            append_utf8(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    Token t;
    t.kind = TokenKind::kString;
    t.text = std::move(out);
    t.loc = loc(b);
    tokens_.push_back(std::move(t));
    return p;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace tern::jinja
