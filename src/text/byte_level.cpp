#include "text/byte_level.h"

#include <array>

#include "text/utf8.h"

namespace tern::text {

namespace {

bool printable(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<std::string, 256> spelling;
  std::array<int16_t, 324> byte_of{};  // code point (< 0x144) -> byte, -1 when none

  Tables() {
    byte_of.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp =
          printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(spelling[static_cast<size_t>(b)], cp);
      byte_of[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view byte_level_char(uint8_t b) {
  return tables().spelling[b];
}

std::optional<uint8_t> byte_level_byte(char32_t cp) {
  const auto& t = tables();
  if (cp >= t.byte_of.size() || t.byte_of[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.byte_of[cp]);
}

void append_byte_level(std::string& out, std::string_view bytes) {
  const auto& t = tables();
  for (char c : bytes) out.append(t.spelling[static_cast<unsigned char>(c)]);
}

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  append_byte_level(out, bytes);
  return out;
}

std::optional<std::string> from_byte_level(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return std::nullopt;
    const auto b = byte_level_byte(utf8_decode(s, i, n));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    i += n;
  }
  return out;
}

}  // namespace tern::text
