// The CUDA Device: its GPU, memory, the queue of launches captured into CUDA graphs, host arrays
// staged for a step. The ops are in cuda_device_matmul.cpp (products), cuda_device_ops.cpp
// (element-wise, norms, RoPE, rows, sampling) and cuda_device_attention.cpp (the KV cache).
#include "backend/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device_internal.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/staging.h"

namespace tern {
namespace {

constexpr size_t kCublasWorkspace = size_t{32} << 20;
constexpr size_t kStagedEntries = 8;
constexpr size_t kStepBytes = size_t{8} << 20;  // staged arrays of one step
constexpr size_t kMaxGraphs = 16;

}  // namespace

using cuda_device_detail::now_us;
using cuda_device_detail::u;

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

Result<CudaDeviceInfo> cuda_device_info(int ordinal) {
  const int count = cuda_device_count();
  if (count == 0) return Error{"no CUDA GPU found"};
  if (ordinal < 0 || ordinal >= count)
    return make_error("CUDA GPU {} does not exist ({} found)", ordinal, count);
  CudaDeviceInfo info;
  info.ordinal = ordinal;
  cudaDeviceProp prop{};
  TERN_CUDA_TRY(cudaGetDeviceProperties(&prop, ordinal));
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  TERN_CUDA_TRY(cudaSetDevice(ordinal));
  size_t free_bytes = 0, total = 0;
  TERN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
  info.free_bytes = free_bytes;
  info.total_bytes = total;
  TERN_CUDA_TRY(cudaDriverGetVersion(&info.driver_version));
  TERN_CUDA_TRY(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}

Result<double> measure_copy_bandwidth(int ordinal, size_t bytes) {
  auto info = cuda_device_info(ordinal);  // checks the ordinal and selects the GPU
  if (!info) return info.error();
  if (2 * bytes + (size_t{256} << 20) > info->free_bytes)
    return make_error("GPU {} has {} MiB free, too little to measure its copy bandwidth", ordinal,
                      info->free_bytes >> 20);
  void* src = nullptr;
  void* dst = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  // Frees whatever was made, on every path out.
  struct Cleanup {
    void*& src;
    void*& dst;
    cudaStream_t& stream;
    cudaEvent_t& start;
    cudaEvent_t& stop;
    ~Cleanup() {
      if (src) cudaFree(src);
      if (dst) cudaFree(dst);
      if (start) cudaEventDestroy(start);
      if (stop) cudaEventDestroy(stop);
      if (stream) cudaStreamDestroy(stream);
    }
  } cleanup{src, dst, stream, start, stop};
  TERN_CUDA_TRY(cudaMalloc(&src, bytes));
  TERN_CUDA_TRY(cudaMalloc(&dst, bytes));
  TERN_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  TERN_CUDA_TRY(cudaEventCreate(&start));
  TERN_CUDA_TRY(cudaEventCreate(&stop));
  TERN_CUDA_TRY(cudaMemsetAsync(src, 1, bytes, stream));
  TERN_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));  // warm-up
  constexpr int kCopies = 5;
  TERN_CUDA_TRY(cudaEventRecord(start, stream));
  for (int i = 0; i < kCopies; ++i)
    TERN_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  TERN_CUDA_TRY(cudaEventRecord(stop, stream));
  TERN_CUDA_TRY(cudaEventSynchronize(stop));
  float ms = 0;
  TERN_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
  if (ms <= 0) return make_error("GPU {}: the copy took no measurable time", ordinal);
  return 2.0 * static_cast<double>(bytes) * kCopies / (static_cast<double>(ms) * 1e6);
}

Result<std::unique_ptr<CudaDevice>> CudaDevice::create(int ordinal) {
  auto info = cuda_device_info(ordinal);
  if (!info) return info.error();
  if (info->major < 9) {
    return make_error("CUDA GPU {} ({}) has compute capability {}.{}; Tern's kernels need 9.0",
                      ordinal, info->name, info->major, info->minor);
  }
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->info_ = *info;
  d->alloc_ = std::make_unique<cuda::CachingAllocator>();
  d->staging_ = std::make_unique<cuda::StagingRing>();
  TERN_CUDA_TRY(cudaSetDevice(ordinal));
  cudaStream_t stream = nullptr;
  TERN_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  d->stream_ = stream;
  cublasHandle_t handle = nullptr;
  TERN_CUBLAS_TRY(cublasCreate(&handle));
  d->cublas_ = handle;
  TERN_CUBLAS_TRY(cublasSetStream(handle, stream));
  auto ws = d->alloc_->allocate(kCublasWorkspace);
  if (!ws) return ws.error();
  d->cublas_workspace_ = *ws;
  TERN_CUBLAS_TRY(cublasSetWorkspace(handle, *ws, kCublasWorkspace));
  TERN_TRY(d->staging_->init());
  auto step = d->alloc_->allocate(kStepBytes);
  if (!step) return step.error();
  d->step_device_ = *step;
  const char* graphs = std::getenv("TERN_CUDA_GRAPHS");
  d->graphs_ = graphs == nullptr || std::strcmp(graphs, "0") != 0;
  const char* mmq = std::getenv("TERN_CUDA_MMQ");
  d->int8_prefill_ = mmq != nullptr && std::strcmp(mmq, "1") == 0;
  if (const char* skip = std::getenv("TERN_CUDA_SKIP_KERNELS"); skip != nullptr && *skip != '\0') {
    std::fprintf(stderr,
                 "warning: TERN_CUDA_SKIP_KERNELS=%s drops those kernels: timing only, the "
                 "outputs are wrong\n",
                 skip);
  }
  const char* timing = std::getenv("TERN_CUDA_TIMING");
  if (timing != nullptr && std::strcmp(timing, "1") == 0) {
    d->timing_ = true;
    for (auto& e : d->timing_events_) TERN_CUDA_TRY(cudaEventCreate(&e));
  }
  return d;
}

CudaDevice::~CudaDevice() {
  q8_ = Temp();
  sample_workspace_ = Temp();
  if (stream_ != nullptr) {
    (void)flush();
    (void)cudaStreamSynchronize(stream_);
  }
  for (auto& e : execs_) (void)cudaGraphExecDestroy(e.exec);
  if (pinned_ != nullptr) (void)cudaFreeHost(pinned_);
  for (auto e : timing_events_) {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
  if (step_device_ != nullptr) alloc_->release(step_device_, kStepBytes);
  for (auto& s : staged_) alloc_->release(s.data, s.bytes);
  for (auto& f : frequencies_) alloc_->release(f.data, f.values.size() * sizeof(float));
  if (cublas_workspace_ != nullptr) alloc_->release(cublas_workspace_, kCublasWorkspace);
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  staging_.reset();
  alloc_.reset();
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

std::string CudaDevice::name() const {
  return fmt::format("cuda:{} ({}, {:.0f} GiB, sm_{}{}, driver {}.{})", info_.ordinal, info_.name,
                     static_cast<double>(info_.total_bytes) / (1024.0 * 1024.0 * 1024.0),
                     info_.major, info_.minor, info_.driver_version / 1000,
                     (info_.driver_version % 1000) / 10);
}

std::string CudaDevice::stats() const {
  std::string s = fmt::format(
      "{} steps launched as CUDA graphs, {} captured; {} 8-bit copies written by the op before "
      "their product; {} cudaMalloc calls",
      graph_launches_, graph_instantiations_, producer_quantizations_,
      alloc_->device_allocations());
  if (timings_.empty()) return s;
  std::map<size_t, size_t> shapes;
  for (const auto& t : timings_) ++shapes[t.ops];
  size_t ops = 0, count = 0;
  for (auto [o, c] : shapes) {
    if (c > count) ops = o, count = c;
  }
  auto median = [&](double StepTiming::*field) {
    std::vector<double> v;
    for (const auto& t : timings_) {
      if (t.ops == ops) v.push_back(t.*field);
    }
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  s += fmt::format(
      "; {} steps of {} ops, median us: wall {:.0f} = queue {:.0f} + flush {:.0f} + gpu {:.0f} + "
      "download {:.0f} (+ rest)",
      count, ops, median(&StepTiming::wall_us), median(&StepTiming::queue_us),
      median(&StepTiming::flush_us), median(&StepTiming::gpu_us), median(&StepTiming::download_us));
  return s;
}

uint64_t CudaDevice::device_allocations() const {
  return alloc_->device_allocations();
}

void CudaDevice::fail(Error error) {
  if (!failed_) {
    failed_ = true;
    error_ = std::move(error);
  }
}

bool CudaDevice::check(int status, const char* what) {
  if (status == cudaSuccess) return true;
  fail(cuda::cuda_error(static_cast<cudaError_t>(status), what));
  return false;
}

CudaDevice::Temp::Temp(Temp&& o) noexcept
    : device(std::exchange(o.device, nullptr)),
      data(std::exchange(o.data, nullptr)),
      bytes(std::exchange(o.bytes, 0)) {}

CudaDevice::Temp& CudaDevice::Temp::operator=(Temp&& o) noexcept {
  if (this != &o) {
    if (device != nullptr) device->alloc_->release(data, bytes);
    device = std::exchange(o.device, nullptr);
    data = std::exchange(o.data, nullptr);
    bytes = std::exchange(o.bytes, 0);
  }
  return *this;
}

CudaDevice::Temp::~Temp() {
  if (device != nullptr) device->alloc_->release(data, bytes);
}

Result<CudaDevice::Temp> CudaDevice::temp(size_t bytes) {
  auto p = alloc_->allocate(bytes);
  if (!p) return p.error();
  return Temp(this, *p, bytes);
}

Result<DeviceBuffer> CudaDevice::allocate(size_t bytes) {
  auto p = alloc_->allocate(bytes == 0 ? 1 : bytes);
  if (!p) return p.error();
  return DeviceBuffer(this, *p, bytes == 0 ? 1 : bytes);
}

void CudaDevice::free(void* data, size_t bytes) {
  alloc_->release(data, bytes == 0 ? 1 : bytes);
}

void CudaDevice::set_graphs(bool on) {
  if (!on) {
    auto ok = flush();
    if (!ok) fail(ok.error());
  }
  graphs_ = on;
}

void CudaDevice::enqueue(std::initializer_list<uint64_t> signature, Launch launch, bool keeps_q8) {
  enqueue(std::span<const uint64_t>(signature.begin(), signature.size()), std::move(launch),
          keeps_q8);
}

void CudaDevice::enqueue(std::span<const uint64_t> signature, Launch launch, bool keeps_q8) {
  if (!keeps_q8) q8_valid_ = false;
  if (failed_) return;
  if (!graphs_) {
    auto ok = launch();
    if (!ok) fail(ok.error());
    return;
  }
  signature_.push_back(signature.size());
  signature_.insert(signature_.end(), signature.begin(), signature.end());
  queued_.push_back(std::move(launch));
}

Result<void> CudaDevice::flush() {
  if (queued_.empty()) return failed_ ? Result<void>(error_) : Result<void>();
  const double flush_start = timing_ ? now_us() : 0.0;
  if (timing_) {
    step_timing_ = StepTiming{};
    step_timing_.ops = queued_.size();
    step_timing_.queue_us = last_download_end_ > 0 ? flush_start - last_download_end_ : 0.0;
  }
  std::vector<Launch> ops = std::move(queued_);
  std::vector<uint64_t> signature = std::move(signature_);
  queued_.clear();
  step_kv_stores_.clear();
  signature_.clear();
  if (failed_) return error_;
  if (!step_host_.empty()) {
    auto ok = staging_->upload(step_host_.data(), step_device_, step_host_.size(), stream_);
    step_host_.clear();
    step_arrays_.clear();
    if (!ok) {
      fail(ok.error());
      return error_;
    }
  }
  cudaGraphExec_t exec = nullptr;
  for (size_t i = execs_.size(); i-- > 0;) {
    if (execs_[i].signature == signature) {
      Exec e = std::move(execs_[i]);
      execs_.erase(execs_.begin() + static_cast<std::ptrdiff_t>(i));
      exec = e.exec;
      execs_.push_back(std::move(e));
      break;
    }
  }
  if (exec == nullptr) {
    if (!check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed),
               "cudaStreamBeginCapture"))
      return error_;
    Result<void> ran;
    for (auto& op : ops) {
      ran = op();
      if (!ran) break;
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (!ran) {
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      fail(ran.error());
      return error_;
    }
    if (!check(end, "cudaStreamEndCapture")) return error_;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (!check(made, "cudaGraphInstantiate")) return error_;
    ++graph_instantiations_;
    execs_.push_back({std::move(signature), exec});
    if (execs_.size() > kMaxGraphs) {
      (void)cudaGraphExecDestroy(execs_.front().exec);
      execs_.erase(execs_.begin());
    }
  }
  ++graph_launches_;
  if (timing_ && !check(cudaEventRecord(timing_events_[0], stream_), "cudaEventRecord"))
    return error_;
  if (!check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch")) return error_;
  if (timing_) {
    if (!check(cudaEventRecord(timing_events_[1], stream_), "cudaEventRecord")) return error_;
    timing_pending_ = true;
    step_timing_.flush_us = now_us() - flush_start;
  }
  return {};
}

void CudaDevice::upload(const void* host, void* device_data, size_t bytes) {
  q8_valid_ = false;
  if (failed_) return;
  // In order with the queued ops: they run first.
  if (!flush()) return;
  auto ok = staging_->upload(host, device_data, bytes, stream_);
  if (!ok) fail(ok.error());
}

void CudaDevice::copy(const void* src, void* dst, size_t bytes) {
  if (bytes == 0) return;
  cudaStream_t s = stream_;
  enqueue({1, u(src), u(dst), bytes}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    return {};
  });
}

void CudaDevice::download(const void* device_data, void* host, size_t bytes) {
  if (failed_) return;
  if (!flush()) return;
  constexpr size_t kPinnedDownload = size_t{16} << 20;
  if (bytes <= kPinnedDownload && pinned_bytes_ < bytes) {
    if (pinned_ != nullptr) (void)cudaFreeHost(pinned_);
    pinned_ = nullptr;
    pinned_bytes_ = 0;
    const size_t want = std::max(bytes, size_t{1} << 20);
    if (cudaMallocHost(&pinned_, want) == cudaSuccess) {
      pinned_bytes_ = want;
    } else {
      pinned_ = nullptr;
      (void)cudaGetLastError();  // fall back to the pageable copy
    }
  }
  const bool bounce = bytes <= pinned_bytes_;
  if (!check(cudaMemcpyAsync(bounce ? pinned_ : host, device_data, bytes, cudaMemcpyDeviceToHost,
                             stream_),
             "cudaMemcpyAsync (download)"))
    return;
  const bool timed = timing_ && timing_pending_;
  if (timed && !check(cudaEventRecord(timing_events_[2], stream_), "cudaEventRecord")) return;
  if (check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (download)") && bounce)
    std::memcpy(host, pinned_, bytes);
  if (timed) {
    timing_pending_ = false;
    const double end = now_us();
    float gpu_ms = 0, download_ms = 0;
    (void)cudaEventElapsedTime(&gpu_ms, timing_events_[0], timing_events_[1]);
    (void)cudaEventElapsedTime(&download_ms, timing_events_[1], timing_events_[2]);
    step_timing_.gpu_us = 1000.0 * gpu_ms;
    step_timing_.download_us = 1000.0 * download_ms;
    step_timing_.wall_us = last_download_end_ > 0 ? end - last_download_end_ : 0.0;
    if (last_download_end_ > 0) timings_.push_back(step_timing_);
    last_download_end_ = end;
  }
}

Result<void> CudaDevice::synchronize() {
  (void)flush();
  if (!failed_) check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  if (failed_) return error_;
  return {};
}

Result<const int32_t*> CudaDevice::stage(std::span<const int32_t> values) {
  if (graphs_) {
    // Into this step's staged arrays (the same array twice in a step is stored once).
    const size_t bytes = values.size_bytes();
    for (auto [offset, size] : step_arrays_) {
      if (size == bytes && std::memcmp(step_host_.data() + offset, values.data(), bytes) == 0)
        return reinterpret_cast<const int32_t*>(static_cast<char*>(step_device_) + offset);
    }
    const size_t offset = (step_host_.size() + 255) / 256 * 256;
    if (offset + bytes > kStepBytes) {
      return make_error("one step stages more than {} MiB of ids, positions and block tables",
                        kStepBytes >> 20);
    }
    step_host_.resize(offset + bytes);
    std::memcpy(step_host_.data() + offset, values.data(), bytes);
    step_arrays_.emplace_back(offset, bytes);
    return reinterpret_cast<const int32_t*>(static_cast<char*>(step_device_) + offset);
  }
  for (auto it = staged_.rbegin(); it != staged_.rend(); ++it) {
    if (it->values.size() == values.size() &&
        std::equal(values.begin(), values.end(), it->values.begin())) {
      return static_cast<const int32_t*>(it->data);
    }
  }
  if (staged_.size() >= kStagedEntries) {
    alloc_->release(staged_.front().data, staged_.front().bytes);
    staged_.erase(staged_.begin());
  }
  const size_t bytes = std::max<size_t>(values.size_bytes(), 4);
  auto p = alloc_->allocate(bytes);
  if (!p) return p.error();
  staged_.push_back({std::vector<int32_t>(values.begin(), values.end()), *p, bytes});
  TERN_TRY(staging_->upload(values.data(), *p, values.size_bytes(), stream_));
  return static_cast<const int32_t*>(*p);
}

Result<const float*> CudaDevice::inverse_frequencies(const RopeParams& params) {
  for (const auto& f : frequencies_) {
    if (f.theta == params.theta && f.rotary_dim == params.rotary_dim &&
        f.factors == params.inverse_frequency_factors)
      return static_cast<const float*>(f.data);
  }
  // Exactly the CPU backend's frequencies, so both rotate by the same angles.
  const int64_t half = params.rotary_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    float f = 1.0f / std::pow(params.theta,
                              static_cast<float>(2 * i) / static_cast<float>(params.rotary_dim));
    if (!params.inverse_frequency_factors.empty())
      f /= params.inverse_frequency_factors[static_cast<size_t>(i)];
    inv[static_cast<size_t>(i)] = f;
  }
  for (const auto& f : frequencies_) {
    if (f.values == inv) return static_cast<const float*>(f.data);
  }
  auto p = alloc_->allocate(std::max<size_t>(inv.size() * sizeof(float), 4));
  if (!p) return p.error();
  TERN_TRY(staging_->upload(inv.data(), *p, inv.size() * sizeof(float), stream_));
  frequencies_.push_back(
      {params.theta, params.rotary_dim, params.inverse_frequency_factors, std::move(inv), *p});
  return static_cast<const float*>(*p);
}

}  // namespace tern
