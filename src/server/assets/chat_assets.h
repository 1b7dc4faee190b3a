// The chat page's files, compiled in from this folder (CMakeLists.txt generates their definitions).
#pragma once

#include <string_view>

namespace tern::server::assets {

extern const std::string_view kChatHtml;
extern const std::string_view kChatCss;
extern const std::string_view kChatJs;

}  // namespace tern::server::assets
