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

// How two GPUs reach each other, from the driver's topology matrix (`nvidia-smi topo -m`, the
// NVML view NCCL also starts from): a bonded set of NVLinks, or a PCIe path (PIX, PXB, PHB, NODE,
// SYS: one bridge ... across CPU sockets).
struct GpuLink {
  int a = 0, b = 0;  // GPU indices, a < b
  std::string path;  // as the driver writes it: "NV18", "PXB", "SYS"
  int nvlinks = 0;   // bonded NVLinks; 0 for a PCIe path
};
// Every pair of GPUs; empty with fewer than two, or when the driver gives no matrix.
std::vector<GpuLink> gpu_links();
std::vector<GpuLink> parse_gpu_topology(const std::string& matrix);
// "NVLink x18", "PCIe through the CPU (PHB)", ...
std::string describe_gpu_link(const GpuLink& link);

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
