// UTF-8 helpers shared by the tokenizers and the streaming detokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tern::text {

// Length of the valid UTF-8 sequence starting at s[pos], or 0 if the bytes there are not one
// (bad lead byte, bad continuation, overlong form, surrogate, above U+10FFFF, or cut short).
size_t utf8_sequence_length(std::string_view s, size_t pos);

// Number of bytes in the longest prefix of a lead byte's sequence that could still become valid
// (used to tell "incomplete, wait for more" from "invalid"): 0 if s[pos..] cannot start a sequence.
size_t utf8_incomplete_tail(std::string_view s, size_t pos);

bool is_valid_utf8(std::string_view s);

// Replaces every invalid byte sequence with U+FFFD (one per maximal invalid subpart).
std::string sanitize_utf8(std::string_view s);

// Decodes the code point at s[pos] (which must start a valid sequence of length n).
char32_t utf8_decode(std::string_view s, size_t pos, size_t n);

void append_utf8(std::string& out, char32_t cp);

// Number of code points (s must be valid UTF-8).
size_t utf8_count(std::string_view s);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

}  // namespace tern::text
