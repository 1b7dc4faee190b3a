#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace tern::text {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Result<Regex> Regex::compile(const std::string& pattern, bool literal) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL allows UTF but not UCP (which only matters for classes anyway).
  const uint32_t options = literal ? (PCRE2_LITERAL | PCRE2_UTF | PCRE2_NO_UTF_CHECK)
                                   : (PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return make_error("pre-tokenizer regex does not compile at offset {}: {} (pattern: {})",
                      error_offset, reinterpret_cast<const char*>(message), pattern);
  }
  auto holder = std::make_shared<Code>();
  holder->code = code;
  holder->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex re;
  re.code_ = std::move(holder);
  re.pattern_ = pattern;
  return re;
}

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos <= s.size()) {
    const int rc =
        code_->jit
            ? pcre2_jit_match(code_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr)
            : pcre2_match(code_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t begin = ov[0];
    const size_t end = ov[1];
    if (end == begin) {
      // Empty match: step over one character so the scan advances.
      if (begin >= s.size()) break;
      size_t next = begin + 1;
      while (next < s.size() && (static_cast<unsigned char>(s[next]) & 0xC0) == 0x80) ++next;
      pos = next;
      continue;
    }
    out.emplace_back(begin, end);
    pos = end;
  }
  pcre2_match_data_free(md);
}

}  // namespace tern::text
