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

namespace {

std::string run_command(const char* command) {
  std::string out;
  FILE* p = ::popen(command, "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

// The cells of one matrix line: tab-separated, trimmed, escape sequences (colour) removed.
std::vector<std::string> cells(const std::string& line) {
  std::string plain;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b') {
      while (i < line.size() && !std::isalpha(static_cast<unsigned char>(line[i]))) ++i;
      continue;
    }
    plain += line[i];
  }
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= plain.size()) {
    size_t end = plain.find('\t', start);
    if (end == std::string::npos) end = plain.size();
    std::string cell = plain.substr(start, end - start);
    const auto first = cell.find_first_not_of(" \r\n");
    const auto last = cell.find_last_not_of(" \r\n");
    out.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
    start = end + 1;
  }
  return out;
}

// "GPU3" -> 3; -1 for anything else.
int gpu_index(const std::string& name) {
  if (name.size() < 4 || name.rfind("GPU", 0) != 0) return -1;
  for (size_t i = 3; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  }
  return std::atoi(name.c_str() + 3);
}

}  // namespace

std::vector<GpuLink> parse_gpu_topology(const std::string& matrix) {
  std::vector<GpuLink> links;
  std::vector<int> columns;  // GPU index of each header cell, -1 for other columns
  size_t start = 0;
  while (start < matrix.size()) {
    size_t end = matrix.find('\n', start);
    if (end == std::string::npos) end = matrix.size();
    const std::string line = matrix.substr(start, end - start);
    start = end + 1;
    auto row = cells(line);
    if (columns.empty()) {
      // The header: an empty first cell, then GPU0 GPU1 ... (then NICs and affinities).
      if (row.size() > 2 && row[0].empty() && gpu_index(row[1]) >= 0) {
        for (const auto& c : row) columns.push_back(gpu_index(c));
      }
      continue;
    }
    const int a = row.empty() ? -1 : gpu_index(row[0]);
    if (a < 0) {
      if (!row.empty() && row[0].rfind("Legend", 0) == 0) break;
      continue;
    }
    for (size_t c = 1; c < row.size() && c < columns.size(); ++c) {
      const int b = columns[c];
      if (b <= a || row[c].empty()) continue;
      GpuLink link{a, b, row[c], 0};
      if (row[c].rfind("NV", 0) == 0) link.nvlinks = std::atoi(row[c].c_str() + 2);
      links.push_back(link);
    }
  }
  std::sort(links.begin(), links.end(),
            [](const GpuLink& x, const GpuLink& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; });
  return links;
}

std::vector<GpuLink> gpu_links() {
  return parse_gpu_topology(run_command("nvidia-smi topo -m 2>/dev/null"));
}

std::string describe_gpu_link(const GpuLink& link) {
  if (link.nvlinks > 0) return "NVLink x" + std::to_string(link.nvlinks);
  const std::string& p = link.path;
  if (p == "PIX") return "PCIe, one switch (PIX)";
  if (p == "PXB") return "PCIe, several switches (PXB)";
  if (p == "PHB") return "PCIe through the CPU (PHB)";
  if (p == "NODE") return "PCIe between host bridges of one NUMA node (NODE)";
  if (p == "SYS") return "PCIe across CPU sockets (SYS)";
  return p;
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
