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
  std::vector<int> fields;
  switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q8_0:
      fields = {0};
      break;
    case TensorType::Q4_K:
      fields = {0, 2};
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

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({4096, 4096})->Args({4096, 14336})->Args({14336, 4096});
  b->ArgNames({"rows", "cols"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(1.0);
}

BENCHMARK(ReadBandwidth)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(Matvec, Q4_K, TensorType::Q4_K)->Apply(shapes);
BENCHMARK_CAPTURE(Matvec, Q6_K, TensorType::Q6_K)->Apply(shapes);
BENCHMARK_CAPTURE(Matvec, Q8_0, TensorType::Q8_0)->Apply(shapes);
BENCHMARK_CAPTURE(Matvec, Q4_0, TensorType::Q4_0)->Apply(shapes);
BENCHMARK_CAPTURE(Matvec, BF16, TensorType::BF16)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
