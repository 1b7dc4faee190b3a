#include "backend/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/staging.h"

namespace tern {

struct CudaDevice::OpInfo {
  enum Kind { kOther, kAdd, kNorm, kGemv, kFloatGemv } kind = kOther;
  const float* a = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
  int64_t n = 0;  // kAdd: elements
  // kNorm
  float* sum = nullptr;
  const float* weight = nullptr;
  float eps = 0;
  int64_t rows = 0, cols = 0;
  void* xq = nullptr;
  // kGemv (a = the F32 x, xq = its 8-bit copy)
  cuda::GemvQ8Multi multi;
  // kFloatGemv (a = x): the F32/F16/BF16 products of one token sharing x
  cuda::GemvFloatMulti floats;
  int64_t k = 0;
  bool quantize = false;
  int q8_group = 32;  // kNorm with xq, kGemv: the values an activation scale covers (q8_group)
};

namespace {

constexpr size_t kCublasWorkspace = size_t{32} << 20;
constexpr size_t kStagedEntries = 8;
constexpr size_t kStepBytes = size_t{8} << 20;  // staged arrays of one step
constexpr size_t kMaxGraphs = 16;

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t u(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}
uint64_t u(int64_t v) {
  return static_cast<uint64_t>(v);
}
uint64_t u(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
// Prefill dequantizes weights into BF16 tiles of at most this many elements.
constexpr int64_t kDequantTile = int64_t{1} << 26;

size_t row_bytes(TensorType type, int64_t cols) {
  const auto& info = tensor_type_info(type);
  return static_cast<size_t>(cols / info.block_elements) * info.block_bytes;
}

}  // namespace

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
  const char* fuse = std::getenv("TERN_CUDA_FUSE");
  // On by default since the row-pair GEMVs (2026-12-04, H200): fused (365 launches a step)
  // 239 tok/s, unfused (652) 219. Before them the multi-matrix and gate/up kernels were slower
  // than the separate GEMVs (169 vs 177.5). TERN_CUDA_FUSE=0 turns fusion off.
  d->fuse_ = fuse == nullptr || std::strcmp(fuse, "0") != 0;
  // Temperature sampling where the logits are (sample.cu), on since it passed its tests on the
  // GPU (2026-12-05, H100: Qwen3-8B Q4_K_M decode at temperature 1, 73.5 -> 266.6 tok/s against
  // 277 greedy). TERN_CUDA_SAMPLE=0 brings the drawn row back to be picked on the host.
  const char* sample = std::getenv("TERN_CUDA_SAMPLE");
  d->sample_kernel_ = sample == nullptr || std::strcmp(sample, "0") != 0;
  const char* mmq = std::getenv("TERN_CUDA_MMQ");
  d->int8_prefill_ = mmq != nullptr && std::strcmp(mmq, "1") == 0;
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
      "{} steps launched as CUDA graphs, {} captured; {} ops fused into the op before them; {} "
      "cudaMalloc calls",
      graph_launches_, graph_instantiations_, fused_ops_, alloc_->device_allocations());
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
  enqueue(signature, std::move(launch), OpInfo{}, keeps_q8);
}

void CudaDevice::enqueue(std::initializer_list<uint64_t> signature, Launch launch,
                         const OpInfo& info, bool keeps_q8) {
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
  infos_.push_back(info);
}

void CudaDevice::fuse_into(size_t index, std::initializer_list<uint64_t> signature, Launch launch,
                           const OpInfo& info) {
  signature_.push_back(signature.size() + 1);
  signature_.push_back(0xF05Eu);  // a fusion marker
  signature_.insert(signature_.end(), signature.begin(), signature.end());
  queued_[index] = std::move(launch);
  infos_[index] = info;
  ++fused_ops_;
}

CudaDevice::OpInfo* CudaDevice::queued_info(size_t back) {
  if (!fuse_ || !graphs_ || failed_ || infos_.size() <= back) return nullptr;
  return &infos_[infos_.size() - 1 - back];
}

CudaDevice::Launch CudaDevice::norm_launch(const OpInfo& i) {
  cudaStream_t s = stream_;
  return [i, s]() -> Result<void> {
    TERN_CUDA_TRY(cuda::add_rms_norm_q8(i.a, i.b, i.sum, i.weight, i.eps, i.rows, i.cols, i.out,
                                        i.xq, i.q8_group, s));
    return {};
  };
}

CudaDevice::Launch CudaDevice::gemv_launch(const OpInfo& i) {
  cudaStream_t s = stream_;
  return [i, s]() -> Result<void> {
    if (i.quantize) TERN_CUDA_TRY(cuda::quantize_q8(i.a, 1, i.k, i.q8_group, i.xq, s));
    if (i.multi.count == 1) {
      const auto& m = i.multi.mats[0];
      TERN_CUDA_TRY(cuda::gemv_q8(m.type, m.w, m.m, i.k, i.xq, 1, m.y, s));
    } else {
      TERN_CUDA_TRY(cuda::gemv_q8_multi(i.multi, i.k, i.xq, s));
    }
    return {};
  };
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
  infos_.clear();
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

Result<void> CudaDevice::matmul(const Tensor& w, const Tensor& x, Tensor& y) {
  if (failed_) return error_;
  const int64_t k = w.ne[0], m = w.rows(), n = x.rows();
  if (x.ne[0] != k || y.ne[0] != m || y.rows() != n) {
    return make_error("matmul shapes: W [{} x {}], x [{} x {}], y [{} x {}]", m, k, n, x.ne[0],
                      y.rows(), y.ne[0]);
  }
  if (!cuda::is_supported(w.type)) {
    return make_error("matmul: the CUDA backend cannot compute with {} weights",
                      tensor_type_name(w.type));
  }
  if (n == 0 || m == 0) return {};
  const bool is_float =
      w.type == TensorType::F32 || w.type == TensorType::F16 || w.type == TensorType::BF16;
  const TensorType type = w.type;
  const void* wd = w.data;
  const float* xd = x.f32();
  float* yd = y.f32();
  cudaStream_t s = stream_;
  if (n <= cuda::kMaxGemvRows) {
    if (is_float && n == 1 && queued_info() != nullptr &&
        cuda::gemv_float_multi_supported(type, k)) {
      float_token_gemv(w, xd, yd);
    } else if (is_float) {
      enqueue({2, u(wd), static_cast<uint64_t>(type), u(m), u(k), u(xd), u(n), u(yd)},
              [=]() -> Result<void> {
                TERN_CUDA_TRY(cuda::gemv_float(type, wd, m, k, xd, n, yd, s));
                return {};
              });
    } else if (int8_gemv_ && cuda::gemv_q8_supported(type)) {
      const int group = cuda::q8_group(type);
      const bool fresh = !q8_cached(x, group);
      auto xq = quantized_activations(x, group);
      if (!xq) return xq.error();
      void* xqd = const_cast<void*>(*xq);
      if (n == 1 && queued_info() != nullptr) {
        token_gemv(w, xd, xqd, fresh, k, group, yd);
      } else {
        enqueue(
            {3, u(wd), static_cast<uint64_t>(type), u(m), u(k), u(xd), u(n), u(yd), u(xqd), fresh,
             static_cast<uint64_t>(group)},
            [=]() -> Result<void> {
              if (fresh) TERN_CUDA_TRY(cuda::quantize_q8(xd, n, k, group, xqd, s));
              TERN_CUDA_TRY(cuda::gemv_q8(type, wd, m, k, xqd, n, yd, s));
              return {};
            },
            true);
      }
    } else {
      enqueue({4, u(wd), static_cast<uint64_t>(type), u(m), u(k), u(xd), u(n), u(yd)},
              [=]() -> Result<void> {
                TERN_CUDA_TRY(cuda::gemv_blocks(type, wd, m, k, xd, n, yd, s));
                return {};
              });
    }
  } else if (int8_prefill_ && cuda::gemm_q8_supported(type, k)) {
    // Prefill with the decode path's 8-bit activations and integer products (gemm_q8.cu).
    const int group = cuda::q8_group(type);
    const bool fresh = !q8_cached(x, group);
    auto xq = quantized_activations(x, group);
    if (!xq) return xq.error();
    void* xqd = const_cast<void*>(*xq);
    enqueue(
        {5, u(wd), static_cast<uint64_t>(type), u(m), u(k), u(xd), u(n), u(yd), u(xqd), fresh,
         static_cast<uint64_t>(group)},
        [=]() -> Result<void> {
          if (fresh) TERN_CUDA_TRY(cuda::quantize_q8(xd, n, k, group, xqd, s));
          TERN_CUDA_TRY(cuda::gemm_q8(type, wd, m, k, xqd, n, yd, s));
          return {};
        },
        true);
  } else {
    TERN_TRY(gemm(w, x, y));
  }
  // A product written over the cached input makes its 8-bit copy stale.
  const auto* ylo = static_cast<const char*>(y.data);
  const auto* xlo = reinterpret_cast<const char*>(q8_x_);
  if (q8_valid_ && ylo < xlo + q8_n_ * q8_k_ * 4 && xlo < ylo + n * m * 4) q8_valid_ = false;
  return {};
}

bool CudaDevice::q8_cached(const Tensor& x, int group) const {
  return q8_valid_ && q8_x_ == x.f32() && q8_n_ == x.rows() && q8_k_ == x.ne[0] &&
         q8_group_ == group;
}

// The 8-bit copy of x with one scale per `group` values (quantized by the caller's launch when
// not cached).
Result<const void*> CudaDevice::quantized_activations(const Tensor& x, int group) {
  const int64_t n = x.rows(), k = x.ne[0];
  if (q8_cached(x, group)) return q8_.data;
  const size_t bytes = cuda::q8_activation_bytes(n, k);
  if (q8_.bytes < bytes) {
    q8_ = Temp();
    auto t = temp(bytes);
    if (!t) return t.error();
    q8_ = std::move(*t);
  }
  q8_x_ = x.f32();
  q8_n_ = n;
  q8_k_ = k;
  q8_group_ = group;
  q8_valid_ = true;
  return static_cast<const void*>(q8_.data);
}

// One token's product with 8-bit activations, with fusion into the queued op before it: the
// quantization into the norm that wrote x (rms_norm + quantize), and products of the same x
// into one launch (q, k, v; gate, up).
void CudaDevice::token_gemv(const Tensor& w, const float* xd, void* xqd, bool fresh, int64_t k,
                            int group, float* yd) {
  const int64_t m = w.rows();
  const std::initializer_list<uint64_t> sig = {
      17,     u(w.data), static_cast<uint64_t>(w.type), u(m), u(k), u(xd), u(yd),
      u(xqd), fresh,     static_cast<uint64_t>(group)};
  cuda::GemvQ8Matrix mat;
  mat.w = w.data;
  mat.type = w.type;
  mat.m = m;
  mat.row_bytes = cuda::gemv_q8_row_bytes(w.type, k);
  mat.y = yd;
  OpInfo* last = queued_info();
  if (fresh && last->kind == OpInfo::kNorm && last->out == xd && last->rows == 1 &&
      last->cols == k && last->xq == nullptr && cuda::norm_q8_supported(k, group)) {
    last->xq = xqd;  // the norm writes the 8-bit copy too
    last->q8_group = group;
    fuse_into(infos_.size() - 1, {18, u(xqd), static_cast<uint64_t>(group)}, norm_launch(*last),
              *last);
    fresh = false;
  }
  last = queued_info();
  if (!fresh && last->kind == OpInfo::kGemv && last->xq == xqd && last->k == k &&
      last->q8_group == group && last->multi.count < cuda::kMaxGemvMulti) {
    OpInfo info = *last;
    auto& g = info.multi;
    g.mats[g.count] = mat;
    g.block_ends[g.count] =
        (g.count == 0 ? 0 : g.block_ends[g.count - 1]) + cuda::gemv_q8_blocks(m);
    ++g.count;
    fuse_into(infos_.size() - 1, sig, gemv_launch(info), info);
    return;
  }
  OpInfo info;
  info.kind = OpInfo::kGemv;
  info.a = xd;
  info.xq = xqd;
  info.k = k;
  info.quantize = fresh;
  info.q8_group = group;
  info.multi.mats[0] = mat;
  info.multi.block_ends[0] = cuda::gemv_q8_blocks(m);
  info.multi.count = 1;
  enqueue(sig, gemv_launch(info), info, true);
}

// One token's product with F32/F16/BF16 weights, fused with the queued products of the same x
// before it into one launch (q, k, v; gate, up): the small k and v matrices stop being
// launches of their own, and each launch has more rows to spread over the SMs.
void CudaDevice::float_token_gemv(const Tensor& w, const float* xd, float* yd) {
  const int64_t m = w.rows(), k = w.ne[0];
  const std::initializer_list<uint64_t> sig = {
      31, u(w.data), static_cast<uint64_t>(w.type), u(m), u(k), u(xd), u(yd)};
  auto overlaps = [&](const float* y, int64_t rows) { return y < xd + k && xd < y + rows; };
  const OpInfo* last = queued_info();
  if (last != nullptr && last->kind == OpInfo::kFloatGemv && last->a == xd && last->k == k &&
      last->floats.type == w.type && last->floats.count < cuda::kMaxGemvFloatMulti &&
      !overlaps(yd, m)) {
    OpInfo info = *last;
    auto& g = info.floats;
    g.w[g.count] = w.data;
    g.m[g.count] = m;
    g.y[g.count] = yd;
    ++g.count;
    fuse_into(infos_.size() - 1, sig, float_gemv_launch(info), info);
    return;
  }
  OpInfo info;
  info.a = xd;
  info.k = k;
  // A product writing its own input cannot take later products of that input.
  info.kind = overlaps(yd, m) ? OpInfo::kOther : OpInfo::kFloatGemv;
  info.floats.type = w.type;
  info.floats.w[0] = w.data;
  info.floats.m[0] = m;
  info.floats.y[0] = yd;
  info.floats.count = 1;
  enqueue(sig, float_gemv_launch(info), info);
}

CudaDevice::Launch CudaDevice::float_gemv_launch(const OpInfo& i) {
  cudaStream_t s = stream_;
  return [i, s]() -> Result<void> {
    TERN_CUDA_TRY(cuda::gemv_float_multi(i.floats, i.k, i.a, s));
    return {};
  };
}

// Prefill: y^T [m, n] = W [m, k] . x^T, in cuBLAS's column-major terms C = op(A) B with A the
// weights as a k x m column-major matrix (transposed) and B = x as k x n.
Result<void> CudaDevice::gemm(const Tensor& w, const Tensor& x, Tensor& y) {
  const int64_t k = w.ne[0], m = w.rows(), n = x.rows();
  const TensorType type = w.type;
  const void* wd = w.data;
  const float* xd = x.f32();
  float* yd = y.f32();
  cudaStream_t s = stream_;
  cublasHandle_t handle = cublas_;
  if (type == TensorType::F32) {
    enqueue({5, u(wd), u(m), u(k), u(xd), u(n), u(yd)}, [=]() -> Result<void> {
      const float alpha = 1.0f, beta = 0.0f;
      const int ik = static_cast<int>(k);
      TERN_CUBLAS_TRY(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                                  static_cast<int>(n), ik, &alpha, static_cast<const float*>(wd),
                                  ik, xd, ik, &beta, yd, static_cast<int>(m)));
      return {};
    });
    return {};
  }
  // Activations (and block weights, in tiles of rows) in BF16 (F16 for F16 weights).
  const bool f16 = type == TensorType::F16;
  auto xh = temp(static_cast<size_t>(n * k) * 2);
  if (!xh) return xh.error();
  auto* xp = static_cast<uint16_t*>(xh->data);
  const bool blocks = !f16 && type != TensorType::BF16;
  const int64_t tile_rows = blocks ? std::max<int64_t>(1, std::min(m, kDequantTile / k)) : m;
  Temp tile;
  if (blocks) {
    auto t = temp(static_cast<size_t>(tile_rows * k) * 2);
    if (!t) return t.error();
    tile = std::move(*t);
  }
  auto* tp = static_cast<uint16_t*>(tile.data);
  enqueue({6, u(wd), static_cast<uint64_t>(type), u(m), u(k), u(xd), u(n), u(yd), u(xp), u(tp)},
          [=]() -> Result<void> {
            const float alpha = 1.0f, beta = 0.0f;
            const int ik = static_cast<int>(k), in = static_cast<int>(n);
            const cudaDataType_t dtype = f16 ? CUDA_R_16F : CUDA_R_16BF;
            if (f16) {
              TERN_CUDA_TRY(cuda::f32_to_f16(xd, n * k, xp, s));
            } else {
              TERN_CUDA_TRY(cuda::f32_to_bf16(xd, n * k, xp, s));
            }
            const size_t rb = row_bytes(type, k);
            for (int64_t r0 = 0; r0 < m; r0 += tile_rows) {
              const int64_t rows = std::min(tile_rows, m - r0);
              const void* a = wd;
              if (blocks) {
                TERN_CUDA_TRY(cuda::dequantize_bf16(
                    type, static_cast<const uint8_t*>(wd) + static_cast<size_t>(r0) * rb, rows, k,
                    tp, s));
                a = tp;
              }
              TERN_CUBLAS_TRY(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                                           in, ik, &alpha, a, dtype, ik, xp, dtype, ik, &beta,
                                           yd + r0, CUDA_R_32F, static_cast<int>(m),
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            }
            return {};
          });
  return {};
}

Result<void> CudaDevice::get_rows(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  if (failed_) return error_;
  const int64_t cols = table.ne[0], rows = table.rows();
  if (!cuda::is_supported(table.type)) {
    return make_error("get_rows: the CUDA backend cannot read {} tables",
                      tensor_type_name(table.type));
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= rows)
      return make_error("token id {} is outside the vocabulary of {}", id, rows);
  }
  if (ids.empty()) return {};
  auto dev_ids = stage(ids);
  if (!dev_ids) return dev_ids.error();
  const TensorType type = table.type;
  const void* td = table.data;
  const int32_t* idp = *dev_ids;
  const int64_t n = static_cast<int64_t>(ids.size());
  float* o = out.f32();
  cudaStream_t s = stream_;
  enqueue({7, static_cast<uint64_t>(type), u(td), u(rows), u(cols), u(idp), u(n), u(o)},
          [=]() -> Result<void> {
            TERN_CUDA_TRY(cuda::get_rows(type, td, rows, cols, idp, n, o, s));
            return {};
          });
  return {};
}

void CudaDevice::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  const float* xd = x.f32();
  const float* wd = weight != nullptr ? weight->f32() : nullptr;
  const int64_t rows = x.rows(), cols = x.ne[0];
  float* o = out.f32();
  cudaStream_t s = stream_;
  const std::initializer_list<uint64_t> sig = {8, u(xd), u(wd), u(eps), u(rows), u(cols), u(o)};
  OpInfo info;
  info.kind = OpInfo::kNorm;
  info.a = xd;
  info.weight = wd;
  info.eps = eps;
  info.rows = rows;
  info.cols = cols;
  info.out = o;
  OpInfo* last = queued_info();
  if (last != nullptr && last->kind == OpInfo::kAdd && last->out == xd && last->n == rows * cols) {
    // The residual add that wrote x, and this norm of it, in one kernel.
    q8_valid_ = false;
    info.a = last->a;
    info.b = last->b;
    info.sum = last->out;
    fuse_into(infos_.size() - 1, sig, norm_launch(info), info);
    return;
  }
  enqueue(
      sig,
      [=]() -> Result<void> {
        TERN_CUDA_TRY(cuda::rms_norm(xd, wd, eps, rows, cols, o, s));
        return {};
      },
      info);
}

void CudaDevice::add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float *ad = a.f32(), *bd = b.f32();
  float* o = out.f32();
  const int64_t n = a.elements();
  cudaStream_t s = stream_;
  OpInfo info;
  info.kind = OpInfo::kAdd;
  info.a = ad;
  info.b = bd;
  info.out = o;
  info.n = n;
  enqueue(
      {9, u(ad), u(bd), u(o), u(n)},
      [=]() -> Result<void> {
        TERN_CUDA_TRY(cuda::add(ad, bd, o, n, s));
        return {};
      },
      info);
}

void CudaDevice::add_row_vector(Tensor& x, const Tensor& v) {
  float* xd = x.f32();
  const float* vd = v.f32();
  const int64_t rows = x.rows(), cols = x.ne[0];
  cudaStream_t s = stream_;
  enqueue({10, u(xd), u(vd), u(rows), u(cols)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::add_row_vector(xd, vd, rows, cols, s));
    return {};
  });
}

void CudaDevice::scale(Tensor& x, float factor) {
  float* xd = x.f32();
  const int64_t n = x.elements();
  cudaStream_t s = stream_;
  enqueue({11, u(xd), u(factor), u(n)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::scale(xd, factor, n, s));
    return {};
  });
}

void CudaDevice::argmax_rows(const Tensor& x, int32_t* ids) {
  const float* xd = x.f32();
  const int64_t rows = x.rows(), cols = x.ne[0];
  cudaStream_t s = stream_;
  enqueue({30, u(xd), u(ids), u(rows), u(cols)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::argmax_rows(xd, rows, cols, ids, s));
    return {};
  });
}

void CudaDevice::sample_rows(const Tensor& x, std::span<const SampleDraw> draws, int32_t* ids) {
  if (failed_) return;
  const float* xd = x.f32();
  const int64_t rows = x.rows(), cols = x.ne[0];
  if (static_cast<int64_t>(draws.size()) < rows) {
    return fail(make_error("sample_rows: {} draws for {} rows", draws.size(), rows));
  }
  // The draws travel as the words of cuda::DrawParams, staged like ids (a step's draws change
  // every step without a new graph).
  static_assert(sizeof(cuda::DrawParams) % sizeof(int32_t) == 0);
  std::vector<int32_t> words(static_cast<size_t>(rows) * sizeof(cuda::DrawParams) / 4);
  for (int64_t r = 0; r < rows; ++r) {
    const SampleDraw& d = draws[static_cast<size_t>(r)];
    const cuda::DrawParams p{d.temperature, d.top_k, d.top_p, d.min_p, d.uniform};
    std::memcpy(words.data() + r * static_cast<int64_t>(sizeof(p) / 4), &p, sizeof(p));
  }
  auto staged = stage(words);
  if (!staged) return fail(staged.error());
  const size_t bytes = cuda::sample_workspace_bytes(cols);
  if (sample_workspace_.bytes < bytes) {
    sample_workspace_ = Temp();
    auto t = temp(bytes);
    if (!t) return fail(t.error());
    sample_workspace_ = std::move(*t);
  }
  const auto* dp = reinterpret_cast<const cuda::DrawParams*>(*staged);
  void* ws = sample_workspace_.data;
  cudaStream_t s = stream_;
  enqueue({32, u(xd), u(ids), u(rows), u(cols), u(dp), u(ws)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::sample_rows(xd, rows, cols, dp, ids, ws, s));
    return {};
  });
}

void CudaDevice::add_weighted_rows(const Tensor& src, std::span<const int32_t> rows,
                                   std::span<const float> weights, Tensor& dst) {
  if (failed_ || rows.empty()) return;
  auto row_ids = stage(rows);
  if (!row_ids) return fail(row_ids.error());
  // The weights travel as their bits, staged like the row ids.
  std::vector<int32_t> bits(weights.size());
  std::memcpy(bits.data(), weights.data(), weights.size_bytes());
  auto weight_bits = stage(bits);
  if (!weight_bits) return fail(weight_bits.error());
  const float* sd = src.f32();
  float* dd = dst.f32();
  const int32_t* rd = *row_ids;
  const auto* wd = reinterpret_cast<const float*>(*weight_bits);
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t cols = src.ne[0];
  cudaStream_t s = stream_;
  enqueue({19, u(sd), u(dd), u(rd), u(wd), u(n), u(cols)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::add_weighted_rows(sd, rd, wd, n, cols, dd, s));
    return {};
  });
}

// gate and up products of one token queued as one launch, then act(gate) * up: all in one kernel.
bool CudaDevice::fuse_glu(const float* g, const float* up, float* out, int64_t n, bool gelu,
                          std::initializer_list<uint64_t> signature) {
  OpInfo* last = queued_info();
  if (last != nullptr && last->kind == OpInfo::kFloatGemv && last->floats.count == 2 &&
      last->floats.y[0] == g && last->floats.y[1] == up && last->floats.m[0] == n &&
      last->floats.m[1] == n) {
    // F32/F16/BF16 gate and up: pair r is gate row r and up row r; one launch writes the product.
    q8_valid_ = false;  // `out` may be the input an 8-bit copy was made of, as in the path below
    OpInfo i = *last;
    i.floats.glu = gelu ? 2 : 1;
    i.floats.out = out;
    i.kind = OpInfo::kOther;  // nothing to fuse into a gated activation
    fuse_into(infos_.size() - 1, signature, float_gemv_launch(i), i);
    return true;
  }
  if (last == nullptr || last->kind != OpInfo::kGemv || last->multi.count != 2) return false;
  const auto& gm = last->multi.mats[0];
  const auto& um = last->multi.mats[1];
  if (gm.y != g || um.y != up || gm.m != n || um.m != n) return false;
  q8_valid_ = false;
  const OpInfo i = *last;
  cudaStream_t s = stream_;
  OpInfo done;  // nothing to fuse into a gated activation
  fuse_into(
      infos_.size() - 1, signature,
      [i, s, gelu, out]() -> Result<void> {
        if (i.quantize) TERN_CUDA_TRY(cuda::quantize_q8(i.a, 1, i.k, i.q8_group, i.xq, s));
        TERN_CUDA_TRY(cuda::gemv_q8_glu(i.multi.mats[0], i.multi.mats[1], i.k, i.xq, gelu, out, s));
        return {};
      },
      done);
  return true;
}

void CudaDevice::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const float *g = gate.f32(), *up_d = up.f32();
  float* o = out.f32();
  const int64_t n = gate.elements();
  cudaStream_t s = stream_;
  if (fuse_glu(g, up_d, o, n, false, {12, u(g), u(up_d), u(o), u(n)})) return;
  enqueue({12, u(g), u(up_d), u(o), u(n)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::silu_mul(g, up_d, o, n, s));
    return {};
  });
}

void CudaDevice::gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const float *g = gate.f32(), *up_d = up.f32();
  float* o = out.f32();
  const int64_t n = gate.elements();
  cudaStream_t s = stream_;
  if (fuse_glu(g, up_d, o, n, true, {13, u(g), u(up_d), u(o), u(n)})) return;
  enqueue({13, u(g), u(up_d), u(o), u(n)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::gelu_tanh_mul(g, up_d, o, n, s));
    return {};
  });
}

void CudaDevice::rope(Tensor& x, std::span<const int32_t> positions, const RopeParams& params) {
  if (failed_) return;
  const int64_t head_dim = x.ne[0], heads = x.ne[1], n = x.ne[2];
  if (static_cast<int64_t>(positions.size()) < n || params.rotary_dim > head_dim) {
    fail(make_error("rope: {} positions for {} tokens, rotary dim {} of head size {}",
                    positions.size(), n, params.rotary_dim, head_dim));
    return;
  }
  auto inv = inverse_frequencies(params);
  if (!inv) return fail(inv.error());
  auto pos = stage(positions.first(static_cast<size_t>(n)));
  if (!pos) return fail(pos.error());
  float* xd = x.f32();
  const int32_t* pd = *pos;
  const float* fd = *inv;
  const int64_t rd = params.rotary_dim;
  const bool neox = params.neox;
  const float ps = params.position_scale;
  cudaStream_t s = stream_;
  // The per-head norm that wrote x in place (one of the last two ops; the other one touches
  // other memory), and this rope, in one kernel.
  const std::initializer_list<uint64_t> sig = {14,    u(xd), u(head_dim), u(heads), u(n),
                                               u(pd), u(fd), u(rd),       neox,     u(ps)};
  const char* lo = reinterpret_cast<const char*>(xd);
  const char* hi = lo + n * heads * head_dim * 4;
  auto apart = [&](const void* p, int64_t elems) {
    const char* c = static_cast<const char*>(p);
    return c + elems * 4 <= lo || c >= hi;
  };
  for (size_t back = 0; back < 2 && head_dim <= 512; ++back) {
    OpInfo* op = queued_info(back);
    if (op == nullptr || op->kind != OpInfo::kNorm || op->b != nullptr || op->xq != nullptr) break;
    if (op->a == xd && op->out == xd && op->rows == n * heads && op->cols == head_dim) {
      const float* wd = op->weight;
      const float eps = op->eps;
      q8_valid_ = false;
      fuse_into(
          infos_.size() - 1 - back, sig,
          [=]() -> Result<void> {
            TERN_CUDA_TRY(
                cuda::rms_norm_rope(xd, wd, eps, head_dim, heads, n, pd, fd, rd, neox, ps, s));
            return {};
          },
          OpInfo{});
      return;
    }
    const int64_t elems = op->rows * op->cols;
    if (!apart(op->a, elems) || !apart(op->out, elems)) break;
  }
  enqueue({14, u(xd), u(head_dim), u(heads), u(n), u(pd), u(fd), u(rd), neox, u(ps)},
          [=]() -> Result<void> {
            TERN_CUDA_TRY(cuda::rope(xd, head_dim, heads, n, pd, fd, rd, neox, ps, s));
            return {};
          });
}

void CudaDevice::store_kv(KvLayer& cache, const Tensor& k, const Tensor& v,
                          std::span<const int32_t> slots) {
  if (failed_ || slots.empty()) return;
  auto dev_slots = stage(slots);
  if (!dev_slots) return fail(dev_slots.error());
  const TensorType type = cache.k.type;
  void *kc = cache.k.data, *vc = cache.v.data;
  const float *kd = k.f32(), *vd = v.f32();
  const int32_t* sd = *dev_slots;
  const int64_t n = static_cast<int64_t>(slots.size()), kvh = cache.kv_heads, hd = cache.head_dim;
  cudaStream_t s = stream_;
  enqueue({15, static_cast<uint64_t>(type), u(kc), u(vc), u(kd), u(vd), u(sd), u(n), u(kvh), u(hd)},
          [=]() -> Result<void> {
            TERN_CUDA_TRY(cuda::store_kv(type, kc, vc, kd, vd, sd, n, kvh, hd, s));
            return {};
          });
}

void CudaDevice::attention(const Tensor& q, const KvLayer& cache,
                           std::span<const AttentionSequence> sequences,
                           const AttentionParams& params, Tensor& out) {
  if (failed_ || sequences.empty()) return;
  const int64_t head_dim = q.ne[0], heads = q.ne[1];
  if (cache.kv_heads <= 0 || heads % cache.kv_heads != 0 || head_dim != cache.head_dim ||
      !cuda::attention_supported(cache.k.type, head_dim, heads / cache.kv_heads)) {
    return fail(
        make_error("attention: {} heads of size {} over {} KV heads of type {} are not "
                   "supported by the CUDA backend",
                   heads, head_dim, cache.kv_heads, tensor_type_name(cache.k.type)));
  }
  // One staged array: 4 ints per sequence, then the block tables, then (token trees) two words
  // of ancestor mask per batch token.
  std::vector<int32_t> packed(4 * sequences.size());
  int64_t tokens = 0, max_keys = 0;
  bool trees = false;
  for (const auto& seq : sequences) {
    if (seq.ancestors.empty()) continue;
    if (static_cast<int64_t>(seq.ancestors.size()) != seq.token_count ||
        seq.token_count > kMaxTreeTokens) {
      return fail(make_error("attention: a token tree of {} masks for {} new tokens (at most {})",
                             seq.ancestors.size(), seq.token_count, kMaxTreeTokens));
    }
    trees = true;
  }
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto& seq = sequences[i];
    packed[4 * i] = static_cast<int32_t>(seq.first_token);
    packed[4 * i + 1] = static_cast<int32_t>(seq.token_count);
    packed[4 * i + 2] = static_cast<int32_t>(seq.first_position);
    packed[4 * i + 3] = static_cast<int32_t>(packed.size() - 4 * sequences.size());
    tokens = std::max(tokens, seq.first_token + seq.token_count);
    max_keys = std::max(max_keys, seq.first_position + seq.token_count);
    packed.insert(packed.end(), seq.block_table.begin(), seq.block_table.end());
  }
  size_t masks_at = 0;
  if (trees) {
    masks_at = packed.size();
    packed.resize(masks_at + 2 * static_cast<size_t>(tokens), -1);  // causal tokens: all ones
    for (const auto& seq : sequences) {
      for (size_t i = 0; i < seq.ancestors.size(); ++i) {
        const uint64_t m = seq.ancestors[i];
        const size_t at =
            masks_at + 2 * static_cast<size_t>(seq.first_token + static_cast<int64_t>(i));
        packed[at] = static_cast<int32_t>(static_cast<uint32_t>(m & 0xFFFFFFFFu));
        packed[at + 1] = static_cast<int32_t>(static_cast<uint32_t>(m >> 32));
      }
    }
  }
  auto dev = stage(packed);
  if (!dev) return fail(dev.error());
  if (params.sliding_window > 0) max_keys = std::min(max_keys, params.sliding_window);

  cuda::AttentionLaunch a;
  a.q = q.f32();
  a.out = out.f32();
  a.k_cache = cache.k.data;
  a.v_cache = cache.v.data;
  a.kv_type = cache.k.type;
  a.tokens = tokens;
  a.heads = heads;
  a.kv_heads = cache.kv_heads;
  a.head_dim = head_dim;
  a.block_size = cache.block_size;
  a.sequences = *dev;
  a.sequence_count = static_cast<int32_t>(sequences.size());
  a.tables = *dev + 4 * sequences.size();
  a.scale = params.scale;
  a.softcap = params.softcap;
  a.window = params.sliding_window;
  if (trees) a.ancestors = reinterpret_cast<const uint32_t*>(*dev + masks_at);
  // Prefill (a sequence bringing 32 or more tokens): the tensor-core kernel, in tiles of 64 of a
  // sequence's tokens (2026-12-05, H100, Qwen3-8B Q4_K_M: prefill of 4,096 tokens 4,600 -> 12,400
  // tok/s). TERN_CUDA_ATTN_PREFILL=0 keeps the CUDA-core kernels for A/B runs.
  static const bool prefill_kernel = [] {
    const char* v = std::getenv("TERN_CUDA_ATTN_PREFILL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  int64_t most_new = 0;
  for (const auto& seq : sequences) most_new = std::max(most_new, seq.token_count);
  if (prefill_kernel && most_new >= 32 && cuda::prefill_attention_supported(a)) {
    std::vector<int32_t> tiles;
    for (size_t i = 0; i < sequences.size(); ++i) {
      for (int64_t t = 0; t < sequences[i].token_count; t += 64) {
        tiles.push_back(static_cast<int32_t>(i));
        tiles.push_back(static_cast<int32_t>(sequences[i].first_token + t));
      }
    }
    auto staged_tiles = stage(tiles);
    if (!staged_tiles) return fail(staged_tiles.error());
    const int32_t* td = *staged_tiles;
    const auto tile_count = static_cast<int64_t>(tiles.size() / 2);
    cudaStream_t s = stream_;
    enqueue({34, u(a.q), u(a.out), u(a.k_cache), u(a.v_cache), u(tokens), u(heads), u(a.kv_heads),
             u(head_dim), u(a.block_size), u(a.sequences), u(a.tables), u(a.scale), u(a.softcap),
             u(a.window), u(td), u(tile_count)},
            [=]() -> Result<void> {
              TERN_CUDA_TRY(cuda::prefill_attention(a, td, tile_count, s));
              return {};
            });
    return;
  }
  // Enough blocks for two per multiprocessor: split long contexts when tokens x heads are few.
  // A power of two, so that a decode step's launch (and graph) stays the same for long spans.
  const int64_t group = heads / cache.kv_heads;
  const int64_t per_block = group >= 8 ? 8 : group > 2 ? 4 : group;
  const int64_t blocks = tokens * cache.kv_heads * ((group + per_block - 1) / per_block);
  const int64_t target = 2 * std::max(1, info_.multiprocessors);
  int64_t splits = 1;
  if (blocks < target) {
    const int64_t per_split = cuda::attention_split_keys(cache.k.type, head_dim);
    const int64_t want =
        std::min((target + blocks - 1) / blocks, (max_keys + per_split - 1) / per_split);
    while (splits * 2 <= want) splits *= 2;
  }
  a.splits = static_cast<int32_t>(splits);
  Temp partial;
  if (splits > 1) {
    auto t = temp(static_cast<size_t>(tokens * heads * splits * (head_dim + 2)) * sizeof(float));
    if (!t) return fail(t.error());
    partial = std::move(*t);
    a.partial = static_cast<float*>(partial.data);
  }
  cudaStream_t s = stream_;
  enqueue({16,
           u(a.q),
           u(a.out),
           u(a.k_cache),
           u(a.v_cache),
           static_cast<uint64_t>(a.kv_type),
           u(tokens),
           u(heads),
           u(a.kv_heads),
           u(head_dim),
           u(a.block_size),
           u(a.sequences),
           static_cast<uint64_t>(a.sequence_count),
           u(a.tables),
           u(a.scale),
           u(a.softcap),
           u(a.window),
           static_cast<uint64_t>(a.splits),
           u(a.partial),
           u(a.ancestors)},
          [=]() -> Result<void> {
            TERN_CUDA_TRY(cuda::attention(a, s));
            return {};
          });
}

}  // namespace tern
