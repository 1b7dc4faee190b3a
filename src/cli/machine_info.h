// What this machine has for models: CPU name, RAM, NVIDIA GPUs (as the driver reports them,
// without needing a CUDA build), and the memory budget a model may use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tern::cli {

struct GpuInfo {
  std::string name;
  uint64_t memory_bytes = 0;
  std::string driver;
};

struct MemoryInfo {
  uint64_t total = 0;
  uint64_t available = 0;
};

std::string cpu_model_name();
MemoryInfo memory_info();     // /proc/meminfo
std::vector<GpuInfo> gpus();  // nvidia-smi; empty when there is none

// Memory a model may use: the largest GPU's, else the RAM available now.
struct MemoryBudget {
  uint64_t bytes = 0;
  std::string from;  // "GPU memory", "RAM available", "--memory"
};
MemoryBudget memory_budget(const std::vector<GpuInfo>& gpus, const MemoryInfo& memory);

}  // namespace tern::cli

namespace tern::cli {
// "24G", "24GiB", "16GB", "512M", "1073741824": bytes (K, M, G, T are powers of 1024); 0 when
// the text is not a size.
uint64_t parse_memory_size(const std::string& text);
}  // namespace tern::cli
