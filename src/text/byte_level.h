// GPT-2's reversible map between bytes and printable Unicode characters (byte-level BPE):
// printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tern::text {

// The UTF-8 spelling of the character that stands for byte b.
std::string_view byte_level_char(uint8_t b);

// The byte a character stands for, if it is one of the 256.
std::optional<uint8_t> byte_level_byte(char32_t cp);

// Raw bytes -> their byte-level spelling.
std::string to_byte_level(std::string_view bytes);
void append_byte_level(std::string& out, std::string_view bytes);

// Byte-level spelling -> raw bytes; nullopt if a character is outside the alphabet or s is not
// UTF-8.
std::optional<std::string> from_byte_level(std::string_view s);

}  // namespace tern::text
