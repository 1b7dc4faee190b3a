#include "backend/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/staging.h"

namespace tern {
namespace {

constexpr size_t kCublasWorkspace = size_t{32} << 20;
constexpr size_t kStagedEntries = 8;
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
  return d;
}

CudaDevice::~CudaDevice() {
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
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

void CudaDevice::upload(const void* host, void* device_data, size_t bytes) {
  if (failed_) return;
  auto ok = staging_->upload(host, device_data, bytes, stream_);
  if (!ok) fail(ok.error());
}

void CudaDevice::download(const void* device_data, void* host, size_t bytes) {
  if (failed_) return;
  if (!check(cudaMemcpyAsync(host, device_data, bytes, cudaMemcpyDeviceToHost, stream_),
             "cudaMemcpyAsync (download)"))
    return;
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (download)");
}

Result<void> CudaDevice::synchronize() {
  if (!failed_) check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  if (failed_) return error_;
  return {};
}

Result<const int32_t*> CudaDevice::stage(std::span<const int32_t> values) {
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
  frequencies_.push_back({std::move(inv), *p});
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
  if (n <= cuda::kMaxGemvRows) {
    if (is_float) {
      TERN_CUDA_TRY(cuda::gemv_float(w.type, w.data, m, k, x.f32(), n, y.f32(), stream_));
    } else if (int8_gemv_ && cuda::gemv_q8_supported(w.type)) {
      auto xq = temp(cuda::q8_activation_bytes(n, k));
      if (!xq) return xq.error();
      TERN_CUDA_TRY(cuda::quantize_q8(x.f32(), n, k, xq->data, stream_));
      TERN_CUDA_TRY(cuda::gemv_q8(w.type, w.data, m, k, xq->data, n, y.f32(), stream_));
    } else {
      TERN_CUDA_TRY(cuda::gemv_blocks(w.type, w.data, m, k, x.f32(), n, y.f32(), stream_));
    }
    return {};
  }
  return gemm(w, x, y);
}

// Prefill: y^T [m, n] = W [m, k] . x^T, in cuBLAS's column-major terms C = op(A) B with A the
// weights as a k x m column-major matrix (transposed) and B = x as k x n.
Result<void> CudaDevice::gemm(const Tensor& w, const Tensor& x, Tensor& y) {
  const int64_t k = w.ne[0], m = w.rows(), n = x.rows();
  const float alpha = 1.0f, beta = 0.0f;
  const int ik = static_cast<int>(k), in = static_cast<int>(n);
  if (w.type == TensorType::F32) {
    TERN_CUBLAS_TRY(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), in, ik,
                                &alpha, w.f32(), ik, x.f32(), ik, &beta, y.f32(),
                                static_cast<int>(m)));
    return {};
  }
  const bool f16 = w.type == TensorType::F16;
  const cudaDataType_t dtype = f16 ? CUDA_R_16F : CUDA_R_16BF;
  auto xh = temp(static_cast<size_t>(n * k) * 2);
  if (!xh) return xh.error();
  auto* xp = static_cast<uint16_t*>(xh->data);
  if (f16) {
    TERN_CUDA_TRY(cuda::f32_to_f16(x.f32(), n * k, xp, stream_));
  } else {
    TERN_CUDA_TRY(cuda::f32_to_bf16(x.f32(), n * k, xp, stream_));
  }
  auto run = [&](const void* a, int64_t rows, float* c) -> Result<void> {
    TERN_CUBLAS_TRY(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), in, ik,
                                 &alpha, a, dtype, ik, xp, dtype, ik, &beta, c, CUDA_R_32F,
                                 static_cast<int>(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return {};
  };
  if (f16 || w.type == TensorType::BF16) return run(w.data, m, y.f32());
  // Block types: dequantize tiles of rows to BF16, one GEMM per tile.
  const int64_t tile_rows = std::max<int64_t>(1, std::min(m, kDequantTile / k));
  auto tile = temp(static_cast<size_t>(tile_rows * k) * 2);
  if (!tile) return tile.error();
  const size_t rb = row_bytes(w.type, k);
  for (int64_t r0 = 0; r0 < m; r0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, m - r0);
    TERN_CUDA_TRY(cuda::dequantize_bf16(
        w.type, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0) * rb, rows, k,
        static_cast<uint16_t*>(tile->data), stream_));
    TERN_TRY(run(tile->data, rows, y.f32() + r0));
  }
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
  TERN_CUDA_TRY(cuda::get_rows(table.type, table.data, rows, cols, *dev_ids,
                               static_cast<int64_t>(ids.size()), out.f32(), stream_));
  return {};
}

void CudaDevice::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  if (failed_) return;
  check(cuda::rms_norm(x.f32(), weight != nullptr ? weight->f32() : nullptr, eps, x.rows(), x.ne[0],
                       out.f32(), stream_),
        "rms_norm");
}

void CudaDevice::add(const Tensor& a, const Tensor& b, Tensor& out) {
  if (failed_) return;
  check(cuda::add(a.f32(), b.f32(), out.f32(), a.elements(), stream_), "add");
}

void CudaDevice::add_row_vector(Tensor& x, const Tensor& v) {
  if (failed_) return;
  check(cuda::add_row_vector(x.f32(), v.f32(), x.rows(), x.ne[0], stream_), "add_row_vector");
}

void CudaDevice::scale(Tensor& x, float factor) {
  if (failed_) return;
  check(cuda::scale(x.f32(), factor, x.elements(), stream_), "scale");
}

void CudaDevice::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  if (failed_) return;
  check(cuda::silu_mul(gate.f32(), up.f32(), out.f32(), gate.elements(), stream_), "silu_mul");
}

void CudaDevice::gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  if (failed_) return;
  check(cuda::gelu_tanh_mul(gate.f32(), up.f32(), out.f32(), gate.elements(), stream_),
        "gelu_tanh_mul");
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
  check(cuda::rope(x.f32(), head_dim, heads, n, *pos, *inv, params.rotary_dim, params.neox,
                   params.position_scale, stream_),
        "rope");
}

void CudaDevice::store_kv(KvLayer& cache, const Tensor& k, const Tensor& v,
                          std::span<const int32_t> slots) {
  if (failed_ || slots.empty()) return;
  auto dev_slots = stage(slots);
  if (!dev_slots) return fail(dev_slots.error());
  check(cuda::store_kv(cache.k.type, cache.k.data, cache.v.data, k.f32(), v.f32(), *dev_slots,
                       static_cast<int64_t>(slots.size()), cache.kv_heads, cache.head_dim, stream_),
        "store_kv");
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
  // One staged array: 4 ints per sequence, then the block tables.
  std::vector<int32_t> packed(4 * sequences.size());
  int64_t tokens = 0, max_keys = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const auto& seq = sequences[s];
    packed[4 * s] = static_cast<int32_t>(seq.first_token);
    packed[4 * s + 1] = static_cast<int32_t>(seq.token_count);
    packed[4 * s + 2] = static_cast<int32_t>(seq.first_position);
    packed[4 * s + 3] = static_cast<int32_t>(packed.size() - 4 * sequences.size());
    tokens = std::max(tokens, seq.first_token + seq.token_count);
    max_keys = std::max(max_keys, seq.first_position + seq.token_count);
    packed.insert(packed.end(), seq.block_table.begin(), seq.block_table.end());
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
  // Enough blocks for two per multiprocessor: split long contexts when tokens x heads are few.
  const int64_t group = heads / cache.kv_heads;
  const int64_t per_block = group >= 8 ? 8 : group > 2 ? 4 : group;
  const int64_t blocks = tokens * cache.kv_heads * ((group + per_block - 1) / per_block);
  const int64_t target = 2 * std::max(1, info_.multiprocessors);
  int64_t splits = 1;
  if (blocks < target) {
    splits = std::min((target + blocks - 1) / blocks, (max_keys + 127) / 128);
    splits = std::max<int64_t>(1, splits);
  }
  const int64_t keys = (max_keys + splits - 1) / splits;
  a.splits = static_cast<int32_t>(splits);
  a.split_keys = static_cast<int32_t>(std::max<int64_t>(32, (keys + 31) / 32 * 32));
  Temp partial;
  if (splits > 1) {
    auto t = temp(static_cast<size_t>(tokens * heads * splits * (head_dim + 2)) * sizeof(float));
    if (!t) return fail(t.error());
    partial = std::move(*t);
    a.partial = static_cast<float*>(partial.data);
  }
  check(cuda::attention(a, stream_), "attention");
}

}  // namespace tern
