// The corpus cases, built exactly as tools/tokenizer/oracle.py builds them.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tern::test {

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < all.size()) {
    size_t nl = all.find('\n', start);
    if (nl == std::string::npos) nl = all.size();
    lines.push_back(all.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

inline std::string join(const std::vector<std::string>& lines, size_t from, size_t count,
                        const std::string& sep) {
  std::string out;
  for (size_t i = from; i < from + count && i < lines.size(); ++i) {
    if (i > from) out += sep;
    out += lines[i];
  }
  return out;
}

inline std::vector<std::string> corpus_cases(const std::string& path) {
  const std::vector<std::string> lines = read_lines(path);
  std::vector<std::string> cases = lines;
  for (size_t k = 0; k < lines.size(); k += 32) cases.push_back(join(lines, k, 8, "\n"));
  for (size_t k = 0; k < lines.size(); k += 64)
    cases.push_back(join(lines, k, 4, "\r\n") + "\n\n\n  \n\t\n");
  return cases;
}

// One line per case: ids separated by spaces.
inline std::vector<std::vector<int32_t>> read_expected(const std::string& path) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& line : read_lines(path)) {
    std::vector<int32_t> ids;
    std::istringstream ls(line);
    long v = 0;
    while (ls >> v) ids.push_back(static_cast<int32_t>(v));
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace tern::test
