#include "text/utf8.h"

namespace tern::text {

namespace {

// Valid range of the second byte for a lead byte, per the Unicode well-formed byte sequences table.
struct LeadInfo {
  size_t length;
  unsigned char lo;
  unsigned char hi;
};

LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes from pos form a valid (possibly incomplete) prefix of a sequence.
size_t valid_prefix(std::string_view s, size_t pos, size_t* full_length) {
  const auto lead = static_cast<unsigned char>(s[pos]);
  const LeadInfo info = lead_info(lead);
  *full_length = info.length;
  if (info.length == 0) return 0;
  if (info.length == 1) return 1;
  size_t i = 1;
  for (; i < info.length && pos + i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[pos + i]);
    const unsigned char lo = i == 1 ? info.lo : 0x80;
    const unsigned char hi = i == 1 ? info.hi : 0xBF;
    if (c < lo || c > hi) return i;  // valid up to (not including) i
  }
  return i;
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t pos) {
  size_t full = 0;
  const size_t n = valid_prefix(s, pos, &full);
  return (full != 0 && n == full) ? full : 0;
}

size_t utf8_incomplete_tail(std::string_view s, size_t pos) {
  size_t full = 0;
  const size_t n = valid_prefix(s, pos, &full);
  if (full == 0 || n == full) return 0;
  return pos + n == s.size() ? n : 0;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t full = 0;
    const size_t n = valid_prefix(s, i, &full);
    if (full != 0 && n == full) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append(kReplacementChar);
      i += n == 0 ? 1 : n;  // a maximal invalid subpart becomes one U+FFFD
    }
  }
  return out;
}

char32_t utf8_decode(std::string_view s, size_t pos, size_t n) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (n == 1) return b0;
  char32_t cp = n == 2 ? (b0 & 0x1Fu) : n == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3Fu);
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_count(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

}  // namespace tern::text
