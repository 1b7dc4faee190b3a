#include "cli/machine_info.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace tern::cli {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

MemoryInfo memory_info() {
  std::ifstream in("/proc/meminfo");
  MemoryInfo m;
  for (std::string key; in >> key;) {
    uint64_t kb = 0;
    in >> kb;
    if (key == "MemTotal:") m.total = kb * 1024;
    if (key == "MemAvailable:") m.available = kb * 1024;
    in.ignore(64, '\n');
  }
  return m;
}

std::vector<GpuInfo> gpus() {
  std::vector<GpuInfo> out;
  FILE* p = ::popen(
      "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits "
      "2>/dev/null",
      "r");
  if (p == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    std::string s(line);
    auto a = s.find(','), b = s.find(',', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    GpuInfo g;
    g.name = s.substr(0, a);
    g.memory_bytes = std::strtoull(s.c_str() + a + 1, nullptr, 10) << 20;
    g.driver = s.substr(b + 2, s.find_last_not_of(" \n") - b - 1);
    out.push_back(g);
  }
  ::pclose(p);
  return out;
}

MemoryBudget memory_budget(const std::vector<GpuInfo>& gpu_list, const MemoryInfo& memory) {
  if (gpu_list.empty()) return {memory.available, "RAM available"};
  MemoryBudget b{0, "GPU memory"};
  for (const auto& g : gpu_list) b.bytes = std::max(b.bytes, g.memory_bytes);
  return b;
}

}  // namespace tern::cli

namespace tern::cli {
uint64_t parse_memory_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("IB"))
    unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit.back() == 'B')
    unit.resize(1);
  double scale = 1;
  if (unit == "K")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty() && unit != "B")
    return 0;
  if (!(value > 0) || value * scale > 1e18) return 0;
  return static_cast<uint64_t>(value * scale);
}
}  // namespace tern::cli
