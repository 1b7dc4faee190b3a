// CPU matvec speed against the machine's read bandwidth, in one run.
//
// 1. ReadBandwidth: every thread of the pool sums its share of a buffer 4x the last-level cache
//    (at least 1 GiB); reports GB/s. Its best result is the reference for everything after it.
// 2. Matvec/<type>/<rows>x<cols>: y = W x on all threads, W cycling through enough copies to
//    overflow the LLC (so weights come from DRAM, as in decode); reports GB/s of weight bytes and
//    that as a fraction of (1) ("of_read_bw").
//
// Run: build-backend/bench/cpu/bench_cpu_matvec [--benchmark_filter=...] (TERN_CPU_PATH picks the
// kernel path; default: the best this CPU has).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "base/fp16.h"

namespace {

using tern::TensorType;

size_t llc_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<size_t>(l3) : size_t{64} << 20;
}

tern::ThreadPool& pool() {
  static tern::ThreadPool instance(0);
  return instance;
}

struct Buffer {
  std::unique_ptr<uint64_t[]> words;
  size_t bytes = 0;
};

Buffer random_buffer(size_t bytes) {
  Buffer b{std::make_unique<uint64_t[]>(bytes / 8 + 1), bytes};
  pool().parallel_for(bytes / 8, [&](size_t begin, size_t end, size_t thread) {
    uint64_t s = 0x9E3779B97F4A7C15ull * (thread + 1);
    for (size_t i = begin; i < end; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      b.words[i] = s;
    }
  });
  return b;
}

double g_read_gbps = 0.0;  // mean GB/s of the last ReadBandwidth run

const Buffer& read_buffer() {
  static const Buffer buf = random_buffer(std::max(size_t{1} << 30, 4 * llc_bytes()));
  return buf;
}

// One streaming pass over the read buffer on all threads; returns seconds.
double read_pass() {
  const Buffer& buf = read_buffer();
  std::atomic<uint64_t> sink{0};
  const auto t0 = std::chrono::steady_clock::now();
  pool().parallel_for(buf.bytes / 64, [&](size_t begin, size_t end, size_t) {
    uint64_t a[8] = {};
    const uint64_t* p = buf.words.get();
    for (size_t i = begin; i < end; ++i) {
      for (int k = 0; k < 8; ++k) a[k] += p[i * 8 + static_cast<size_t>(k)];
    }
    uint64_t s = 0;
    for (uint64_t v : a) s += v;
    sink.fetch_add(s, std::memory_order_relaxed);
  });
  benchmark::DoNotOptimize(sink.load());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ReadBandwidth(benchmark::State& state) {
  const double bytes = static_cast<double>(read_buffer().bytes);
  double seconds = 0.0;
  for (auto _ : state) seconds += read_pass();
  g_read_gbps = bytes * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["GB/s"] = g_read_gbps;
  state.counters["threads"] = static_cast<double>(pool().size());
  state.counters["buffer_MiB"] = bytes / (1 << 20);
}

// Gives random blocks finite, moderate fp16 scales (and float types finite values).
void sanitize(TensorType type, uint8_t* data, size_t bytes) {
  if (type == TensorType::BF16 || type == TensorType::F16) {
    auto* v = reinterpret_cast<uint16_t*>(data);
    const uint16_t keep = type == TensorType::BF16 ? 0x807F : 0x83FF;
    const uint16_t exponent = type == TensorType::BF16 ? 0x3F00 : 0x3800;
    for (size_t i = 0; i < bytes / 2; ++i) v[i] = static_cast<uint16_t>((v[i] & keep) | exponent);
    return;
  }
  std::vector<int> fields;  // byte offsets of the fp16 scales in a block
  switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q8_0:
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS:
      fields = {0};
      break;
    case TensorType::Q4_1:
    case TensorType::Q5_1:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
      fields = {0, 2};
      break;
    case TensorType::Q2_K:
      fields = {80, 82};
      break;
    case TensorType::Q3_K:
      fields = {108};
      break;
    case TensorType::Q6_K:
      fields = {208};
      break;
    default:
      break;
  }
  const size_t block = tern::tensor_type_info(type).block_bytes;
  const uint16_t scale = tern::float_to_fp16(0.01f);
  for (size_t b = 0; b + block <= bytes; b += block) {
    for (int f : fields) std::memcpy(data + b + static_cast<size_t>(f), &scale, 2);
  }
}

void Matvec(benchmark::State& state, TensorType type) {
  const auto rows = state.range(0), cols = state.range(1);
  const size_t matrix_bytes = *tern::tensor_bytes(type, static_cast<uint64_t>(rows * cols));
  const size_t copies = std::max<size_t>(2, (2 * llc_bytes()) / matrix_bytes + 1);
  Buffer w = random_buffer(copies * matrix_bytes);
  auto* base = reinterpret_cast<uint8_t*>(w.words.get());
  sanitize(type, base, copies * matrix_bytes);
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  tern::cpu::Scratch scratch;
  tern::cpu::KernelOptions options;
  options.scratch = &scratch;
  size_t next = 0;
  double seconds = 0.0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = tern::cpu::matvec(type, base + next * matrix_bytes, rows, cols, x.data(), y.data(),
                               pool(), options);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r) state.SkipWithError(r.error().message.c_str());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies;
  }
  const double gbps =
      static_cast<double>(matrix_bytes) * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["GB/s"] = gbps;
  if (g_read_gbps > 0) state.counters["of_read_bw"] = gbps / g_read_gbps;
  // The machine is shared: re-measure the read bandwidth right after, under the same load.
  double read_seconds = 0.0;
  for (int k = 0; k < 3; ++k) read_seconds += read_pass();
  const double local_read = 3.0 * static_cast<double>(read_buffer().bytes) / read_seconds / 1e9;
  state.counters["read_GB/s_now"] = local_read;
  state.counters["of_read_now"] = gbps / local_read;
  state.SetLabel(std::string(tern::cpu::cpu_path_name(tern::cpu::default_cpu_path())));
}

// As Matvec, with the weights in the row-interleaved layout of packed.h (the AVX-512 path).
void MatvecPacked(benchmark::State& state, TensorType type) {
  const auto rows = state.range(0), cols = state.range(1);
  if (!tern::cpu::can_pack(type, rows, cols)) {
    state.SkipWithError("no packed kernel on this CPU");
    return;
  }
  const size_t row_major_bytes = *tern::tensor_bytes(type, static_cast<uint64_t>(rows * cols));
  const size_t matrix_bytes = tern::cpu::packed_bytes(type, rows, cols);
  const size_t copies = std::max<size_t>(2, (2 * llc_bytes()) / matrix_bytes + 1);
  Buffer source = random_buffer(row_major_bytes);
  auto* src = reinterpret_cast<uint8_t*>(source.words.get());
  sanitize(type, src, row_major_bytes);
  Buffer w = random_buffer(copies * matrix_bytes);
  auto* base = reinterpret_cast<uint8_t*>(w.words.get());
  for (size_t c = 0; c < copies; ++c)
    tern::cpu::pack_rows(type, src, rows, cols, base + c * matrix_bytes, pool());
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  tern::cpu::Scratch scratch;
  tern::cpu::KernelOptions options;
  options.scratch = &scratch;
  size_t next = 0;
  double seconds = 0.0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = tern::cpu::matmul_packed(type, base + next * matrix_bytes, rows, cols, x.data(), 1,
                                      y.data(), pool(), options);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r) state.SkipWithError(r.error().message.c_str());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies;
  }
  const double gbps =
      static_cast<double>(matrix_bytes) * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["GB/s"] = gbps;
  if (g_read_gbps > 0) state.counters["of_read_bw"] = gbps / g_read_gbps;
  double read_seconds = 0.0;
  for (int k = 0; k < 3; ++k) read_seconds += read_pass();
  const double local_read = 3.0 * static_cast<double>(read_buffer().bytes) / read_seconds / 1e9;
  state.counters["read_GB/s_now"] = local_read;
  state.counters["of_read_now"] = gbps / local_read;
}

// Cache-resident small matrices (the real models' decode): y = W x with one W reused, all threads.
// Reports microseconds per call and weight GB/s; thread-pool dispatch and activation quantization
// are included, as in decode.
void MatvecHot(benchmark::State& state, TensorType type) {
  const auto rows = state.range(0), cols = state.range(1);
  const size_t matrix_bytes = *tern::tensor_bytes(type, static_cast<uint64_t>(rows * cols));
  Buffer w = random_buffer(matrix_bytes);
  auto* base = reinterpret_cast<uint8_t*>(w.words.get());
  sanitize(type, base, matrix_bytes);
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  tern::cpu::Scratch scratch;
  tern::cpu::KernelOptions options;
  options.scratch = &scratch;
  double seconds = 0.0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = tern::cpu::matvec(type, base, rows, cols, x.data(), y.data(), pool(), options);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r) state.SkipWithError(r.error().message.c_str());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] =
      static_cast<double>(matrix_bytes) * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.SetLabel(std::string(tern::cpu::cpu_path_name(tern::cpu::default_cpu_path())));
}

// One thread, in-cache weights (512 x 4096), rate over the thread's CPU time: the kernels' own
// throughput, robust to other processes on a shared machine (descheduled time is not counted).
// Includes the activation quantization of every call.
void Kernel1T(benchmark::State& state, TensorType type) {
  static tern::ThreadPool single(1);
  const int64_t rows = 512, cols = 4096;
  const size_t matrix_bytes = *tern::tensor_bytes(type, static_cast<uint64_t>(rows * cols));
  Buffer w = random_buffer(matrix_bytes);
  auto* base = reinterpret_cast<uint8_t*>(w.words.get());
  sanitize(type, base, matrix_bytes);
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  tern::cpu::Scratch scratch;
  tern::cpu::KernelOptions options;
  options.scratch = &scratch;
  for (auto _ : state) {
    auto r = tern::cpu::matvec(type, base, rows, cols, x.data(), y.data(), single, options);
    if (!r) state.SkipWithError(r.error().message.c_str());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(matrix_bytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(tern::cpu::cpu_path_name(tern::cpu::default_cpu_path())));
}

// Prefill: Y[n x rows] = X[n x cols] W^T, weights cache-cold at the first activation row only.
// Reports GFLOP/s (2 * n * rows * cols per call).
void Matmul(benchmark::State& state, TensorType type) {
  const auto rows = state.range(0), cols = state.range(1), n = state.range(2);
  const size_t matrix_bytes = *tern::tensor_bytes(type, static_cast<uint64_t>(rows * cols));
  Buffer w = random_buffer(matrix_bytes);
  auto* base = reinterpret_cast<uint8_t*>(w.words.get());
  sanitize(type, base, matrix_bytes);
  std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  tern::cpu::Scratch scratch;
  tern::cpu::KernelOptions options;
  options.scratch = &scratch;
  double seconds = 0.0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = tern::cpu::matmul(type, base, rows, cols, x.data(), n, y.data(), pool(), options);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r) state.SkipWithError(r.error().message.c_str());
    benchmark::DoNotOptimize(y.data());
  }
  const double flops = 2.0 * static_cast<double>(n * rows * cols);
  state.counters["GFLOP/s"] = flops * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.SetLabel(std::string(tern::cpu::cpu_path_name(tern::cpu::default_cpu_path())));
}

// As Matmul, with the weights packed (packed.h).
void MatmulPacked(benchmark::State& state, TensorType type) {
  const auto rows = state.range(0), cols = state.range(1), n = state.range(2);
  if (!tern::cpu::can_pack(type, rows, cols)) {
    state.SkipWithError("no packed kernel on this CPU");
    return;
  }
  const size_t row_major_bytes = *tern::tensor_bytes(type, static_cast<uint64_t>(rows * cols));
  Buffer source = random_buffer(row_major_bytes);
  auto* src = reinterpret_cast<uint8_t*>(source.words.get());
  sanitize(type, src, row_major_bytes);
  std::vector<uint8_t> packed(tern::cpu::packed_bytes(type, rows, cols));
  tern::cpu::pack_rows(type, src, rows, cols, packed.data(), pool());
  std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  tern::cpu::Scratch scratch;
  tern::cpu::KernelOptions options;
  options.scratch = &scratch;
  double seconds = 0.0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = tern::cpu::matmul_packed(type, packed.data(), rows, cols, x.data(), n, y.data(),
                                      pool(), options);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r) state.SkipWithError(r.error().message.c_str());
    benchmark::DoNotOptimize(y.data());
  }
  const double flops = 2.0 * static_cast<double>(n * rows * cols);
  state.counters["GFLOP/s"] = flops * static_cast<double>(state.iterations()) / seconds / 1e9;
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({4096, 4096})->Args({4096, 14336})->Args({14336, 4096});
  b->ArgNames({"rows", "cols"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(1.0);
}

void square(benchmark::internal::Benchmark* b) {
  b->Args({4096, 4096})->ArgNames({"rows", "cols"});
  b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(1.0);
}

// SmolLM2-135M (hidden 576, ffn 1536) and Gemma 3 270M (hidden 640, q 1024, ffn 2048) shapes.
void small_shapes(benchmark::internal::Benchmark* b) {
  b->Args({576, 576})->Args({1536, 576})->Args({576, 1536})->Args({1024, 640})->Args({2048, 640});
  b->Args({640, 2048})->ArgNames({"rows", "cols"})->UseRealTime()->MinTime(0.3);
  b->Unit(benchmark::kMicrosecond);
}

// Gemma 3 270M's K-quant matrices: attn_output (Q4_K, 640 x 1024) and ffn_down (Q6_K, 640 x 2048).
template <int kCols>
void gemma_k_shape(benchmark::internal::Benchmark* b) {
  b->Args({640, kCols})->ArgNames({"rows", "cols"})->UseRealTime()->MinTime(0.3);
  b->Unit(benchmark::kMicrosecond);
}

void prefill_shapes(benchmark::internal::Benchmark* b) {
  b->Args({4096, 4096, 64})->Args({4096, 4096, 512})->ArgNames({"rows", "cols", "n"});
  b->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
}

// Prefill of the small real models and Qwen3-1.7B: SmolLM2 ffn_up (1536 x 576), Gemma 3 ffn_down
// (640 x 2048), Qwen3-1.7B ffn_up (6144 x 2048), 128 prompt tokens.
void small_prefill_shapes(benchmark::internal::Benchmark* b) {
  b->Args({1536, 576, 128})->Args({640, 2048, 128})->Args({6144, 2048, 128})->Args({6144, 2048, 1});
  b->ArgNames({"rows", "cols", "n"})->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
}

BENCHMARK(ReadBandwidth)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(Matvec, Q4_K, TensorType::Q4_K)->Apply(shapes);
BENCHMARK_CAPTURE(Matvec, Q6_K, TensorType::Q6_K)->Apply(shapes);
BENCHMARK_CAPTURE(MatvecPacked, Q4_K, TensorType::Q4_K)->Apply(shapes);
BENCHMARK_CAPTURE(MatvecPacked, Q6_K, TensorType::Q6_K)->Apply(shapes);
BENCHMARK_CAPTURE(MatvecPacked, Q8_0, TensorType::Q8_0)->Apply(shapes);
BENCHMARK_CAPTURE(MatvecPacked, Q5_0, TensorType::Q5_0)->Apply(square);
BENCHMARK_CAPTURE(Matvec, Q8_0, TensorType::Q8_0)->Apply(shapes);
BENCHMARK_CAPTURE(Matvec, Q4_0, TensorType::Q4_0)->Apply(shapes);
BENCHMARK_CAPTURE(Matvec, BF16, TensorType::BF16)->Apply(shapes);
BENCHMARK_CAPTURE(Matvec, Q4_1, TensorType::Q4_1)->Apply(square);
BENCHMARK_CAPTURE(Matvec, Q5_0, TensorType::Q5_0)->Apply(square);
BENCHMARK_CAPTURE(Matvec, Q5_1, TensorType::Q5_1)->Apply(square);
BENCHMARK_CAPTURE(Matvec, IQ4_NL, TensorType::IQ4_NL)->Apply(square);
BENCHMARK_CAPTURE(Matvec, Q2_K, TensorType::Q2_K)->Apply(square);
BENCHMARK_CAPTURE(Matvec, Q3_K, TensorType::Q3_K)->Apply(square);
BENCHMARK_CAPTURE(Matvec, Q5_K, TensorType::Q5_K)->Apply(square);
BENCHMARK_CAPTURE(Matvec, IQ4_XS, TensorType::IQ4_XS)->Apply(square);
BENCHMARK_CAPTURE(MatvecHot, Q4_1, TensorType::Q4_1)->Apply(small_shapes);
BENCHMARK_CAPTURE(MatvecHot, Q5_0, TensorType::Q5_0)->Apply(small_shapes);
BENCHMARK_CAPTURE(MatvecHot, Q8_0, TensorType::Q8_0)->Apply(small_shapes);
BENCHMARK_CAPTURE(MatvecHot, Q4_K, TensorType::Q4_K)->Apply(gemma_k_shape<1024>);
BENCHMARK_CAPTURE(MatvecHot, Q6_K, TensorType::Q6_K)->Apply(gemma_k_shape<2048>);
BENCHMARK_CAPTURE(Kernel1T, Q4_0, TensorType::Q4_0)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, Q4_1, TensorType::Q4_1)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, Q5_0, TensorType::Q5_0)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, Q5_1, TensorType::Q5_1)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, Q8_0, TensorType::Q8_0)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, IQ4_NL, TensorType::IQ4_NL)
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, Q2_K, TensorType::Q2_K)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, Q3_K, TensorType::Q3_K)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, Q4_K, TensorType::Q4_K)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, Q5_K, TensorType::Q5_K)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, Q6_K, TensorType::Q6_K)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, IQ4_XS, TensorType::IQ4_XS)
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);
BENCHMARK_CAPTURE(Kernel1T, BF16, TensorType::BF16)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
BENCHMARK_CAPTURE(Matmul, Q4_K, TensorType::Q4_K)->Apply(prefill_shapes);
BENCHMARK_CAPTURE(Matmul, Q8_0, TensorType::Q8_0)->Apply(prefill_shapes);
BENCHMARK_CAPTURE(Matmul, Q5_K, TensorType::Q5_K)->Apply(prefill_shapes);
BENCHMARK_CAPTURE(Matmul, IQ4_NL, TensorType::IQ4_NL)->Apply(prefill_shapes);
BENCHMARK_CAPTURE(Matmul, Q6_K, TensorType::Q6_K)->Apply(small_prefill_shapes);
BENCHMARK_CAPTURE(Matmul, Q4_K, TensorType::Q4_K)->Apply(small_prefill_shapes);
BENCHMARK_CAPTURE(Matmul, Q4_1, TensorType::Q4_1)->Apply(small_prefill_shapes);
BENCHMARK_CAPTURE(Matmul, Q5_0, TensorType::Q5_0)->Apply(small_prefill_shapes);
BENCHMARK_CAPTURE(Matmul, Q8_0, TensorType::Q8_0)->Apply(small_prefill_shapes);
BENCHMARK_CAPTURE(MatmulPacked, Q4_K, TensorType::Q4_K)->Apply(small_prefill_shapes);
BENCHMARK_CAPTURE(MatmulPacked, Q6_K, TensorType::Q6_K)->Apply(small_prefill_shapes);
BENCHMARK_CAPTURE(MatmulPacked, Q8_0, TensorType::Q8_0)->Apply(small_prefill_shapes);
BENCHMARK_CAPTURE(MatmulPacked, Q5_0, TensorType::Q5_0)->Apply(small_prefill_shapes);

}  // namespace

BENCHMARK_MAIN();
