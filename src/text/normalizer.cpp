#include "text/normalizer.h"

#ifdef TERN_TEXT_HAVE_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

namespace tern::text {

namespace {

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace

bool Normalizer::nfc_supported() {
#ifdef TERN_TEXT_HAVE_ICU
  return true;
#else
  return false;
#endif
}

std::string nfc(std::string_view s) {
#ifdef TERN_TEXT_HAVE_ICU
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* norm = unorm2_getNFCInstance(&status);
  if (U_FAILURE(status)) return std::string(s);
  std::u16string wide(s.size() + 1, u'\0');
  int32_t wide_len = 0;
  u_strFromUTF8(wide.data(), static_cast<int32_t>(wide.size()), &wide_len, s.data(),
                static_cast<int32_t>(s.size()), &status);
  if (U_FAILURE(status)) return std::string(s);
  std::u16string normal(static_cast<size_t>(wide_len) * 3 + 4, u'\0');
  const int32_t normal_len = unorm2_normalize(norm, wide.data(), wide_len, normal.data(),
                                              static_cast<int32_t>(normal.size()), &status);
  if (U_FAILURE(status)) return std::string(s);
  std::string out(static_cast<size_t>(normal_len) * 3 + 4, '\0');
  int32_t out_len = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &out_len, normal.data(), normal_len,
              &status);
  if (U_FAILURE(status)) return std::string(s);
  out.resize(static_cast<size_t>(out_len));
  return out;
#else
  return std::string(s);
#endif
}

std::string Normalizer::apply(std::string_view s) const {
  std::string cur(s);
  for (const auto& step : steps_) {
    if (const auto* r = std::get_if<ReplaceNormalizer>(&step)) {
      cur = replace_all(cur, r->from, r->to);
    } else if (const auto* p = std::get_if<PrependNormalizer>(&step)) {
      if (!cur.empty()) cur = p->prefix + cur;
    } else {
      cur = nfc(cur);
    }
  }
  return cur;
}

}  // namespace tern::text
