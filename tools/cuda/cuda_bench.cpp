// tern-cuda-bench: times the CUDA backend's kernels on the shapes of a Qwen3-8B-sized model and
// puts them against the GPU's measured device-to-device copy bandwidth (bytes read + written per
// second): decode GEMV per weight type and kernel (int8 activations or F32), the prefill GEMM,
// and decode attention over 1K and 16K tokens of F16 KV. One line per case, a table at the end.
//   tern-cuda-bench [--quick | --decode | --attention | --elementwise]   (--decode: n = 1 products
//   of Q4_K/Q6_K/Q8_0 only, and attention; --attention: decode attention only, over 512 to 32K
//   tokens, and prefill attention of 512 tokens after 1K and 16K; --elementwise: the small
//   kernels around the products (conversion, norms, RoPE, SiLU, adds, activation quantization,
//   embedding rows, argmax) at decode and prefill sizes, bytes read + written against the copy)
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/kernels.h"
#include "base/fp16.h"

namespace tern {
namespace {

#define CHECK(call)                                                  \
  do {                                                               \
    cudaError_t s_ = (call);                                         \
    if (s_ != cudaSuccess) {                                         \
      fmt::print(stderr, "{}: {}\n", #call, cudaGetErrorString(s_)); \
      std::exit(1);                                                  \
    }                                                                \
  } while (0)

// Median milliseconds of `reps` runs of f, timed with events on `stream`.
double time_ms(cudaStream_t stream, int reps, const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(a, stream));
    f();
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Milliseconds per run of f when `reps` runs are captured into one CUDA graph (launch cost out),
// the median of 7 launches.
double graph_ms(cudaStream_t stream, int reps, const std::function<void()>& f) {
  f();
  CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  for (int i = 0; i < reps; ++i) f();
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = time_ms(stream, 7, [&] { CHECK(cudaGraphLaunch(exec, stream)); });
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return ms / reps;
}

// Random bytes with sane fp16 scales (as tests/backend/test_util.h does).
std::vector<uint8_t> random_weights(TensorType type, int64_t rows, int64_t cols,
                                    std::mt19937& rng) {
  const auto& info = tensor_type_info(type);
  const size_t blocks = static_cast<size_t>(rows * cols / info.block_elements);
  std::vector<uint8_t> w(blocks * info.block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  std::vector<int> fields;
  switch (type) {
    case TensorType::F16:
    case TensorType::BF16:
      for (size_t i = 0; i < blocks; ++i) {
        const uint16_t h = type == TensorType::F16 ? float_to_fp16(0.01f) : float_to_bf16(0.01f);
        std::memcpy(&w[i * 2], &h, 2);
      }
      return w;
    case TensorType::Q4_0:
    case TensorType::Q8_0:
      fields = {0};
      break;
    case TensorType::Q4_K:
    case TensorType::Q5_K:
      fields = {0, 2};
      break;
    case TensorType::Q6_K:
      fields = {208};
      break;
    default:
      break;
  }
  const uint16_t h = float_to_fp16(0.01f);
  for (size_t i = 0; i < blocks; ++i)
    for (int off : fields) std::memcpy(&w[i * info.block_bytes + static_cast<size_t>(off)], &h, 2);
  return w;
}

struct Row {
  std::string what;
  double eager_ms, ms, gbs, fraction;
};

void print_table(const std::vector<Row>& rows) {
  fmt::print(
      "\n| case | ms in a graph | ms launched alone | GB/s | of copy BW |\n"
      "| --- | ---: | ---: | ---: | ---: |\n");
  for (const auto& r : rows)
    fmt::print("| {} | {:.4f} | {:.4f} | {:.0f} | {:.0f}% |\n", r.what, r.ms, r.eager_ms, r.gbs,
               100.0 * r.fraction);
}

// The kernels of convert.cu, norm.cu, rope.cu, elementwise.cu, quantize_q8.cu, get_rows.cu and
// argmax.cu on Qwen3-8B's widths, for 1 token (decode, where they are latency-bound) and for 512
// and 2,048 (prefill chunks), each timed in a graph of its own; GB/s counts the bytes each reads
// and writes once.
void time_elementwise(cudaStream_t stream, double copy_gbs, std::vector<Row>& rows) {
  constexpr int64_t kHidden = 4096, kFfn = 12288, kHeads = 32, kHeadDim = 128, kVocab = 151936;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t most = 2048 * kFfn;
  std::vector<float> host(static_cast<size_t>(most));
  for (auto& v : host) v = normal(rng);
  auto buffer = [&](size_t bytes) {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, bytes));
    return p;
  };
  auto* a = static_cast<float*>(buffer(static_cast<size_t>(most) * 4));
  auto* b = static_cast<float*>(buffer(static_cast<size_t>(most) * 4));
  auto* out = static_cast<float*>(buffer(static_cast<size_t>(most) * 4));
  CHECK(cudaMemcpy(a, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  auto* weight = static_cast<float*>(buffer(kFfn * 4));
  CHECK(cudaMemcpy(weight, host.data(), kFfn * 4, cudaMemcpyHostToDevice));
  std::vector<int32_t> positions(2048);
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(1000 + i);
  auto* pos = static_cast<int32_t*>(buffer(positions.size() * 4));
  CHECK(cudaMemcpy(pos, positions.data(), positions.size() * 4, cudaMemcpyHostToDevice));
  std::vector<float> freqs(kHeadDim / 2);
  for (size_t i = 0; i < freqs.size(); ++i)
    freqs[i] = std::pow(1e6f, -2.0f * static_cast<float>(i) / kHeadDim);
  auto* inv_freq = static_cast<float*>(buffer(freqs.size() * 4));
  CHECK(cudaMemcpy(inv_freq, freqs.data(), freqs.size() * 4, cudaMemcpyHostToDevice));
  // An embedding table of Q4_K rows (random blocks, sane scales) and ids spread over it.
  constexpr int64_t kTableRows = 32768;  // the gather is random either way
  auto table = random_weights(TensorType::Q4_K, kTableRows, kHidden, rng);
  void* dtable = buffer(table.size());
  CHECK(cudaMemcpy(dtable, table.data(), table.size(), cudaMemcpyHostToDevice));
  std::vector<int32_t> ids(2048);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % kTableRows);
  auto* dids = static_cast<int32_t*>(buffer(ids.size() * 4));
  CHECK(cudaMemcpy(dids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  const size_t q4k_row = table.size() / kTableRows;
  auto* argmax_ids = static_cast<int32_t*>(buffer(8 * 4));

  auto add_row = [&](const std::string& what, double bytes, const std::function<void()>& f) {
    const double eager = time_ms(stream, 20, f);
    const double ms = graph_ms(stream, 20, f);
    const double gbs = bytes / (ms * 1e6);
    fmt::print("{}: {:.4f} ms, {:.0f} GB/s\n", what, ms, gbs);
    rows.push_back({what, eager, ms, gbs, gbs / copy_gbs});
  };
  for (int64_t n : {int64_t{1}, int64_t{512}, int64_t{2048}}) {
    const auto nd = static_cast<double>(n);
    add_row(fmt::format("convert F32 -> BF16 {}x{}", n, kFfn), 6.0 * nd * kFfn, [&] {
      CHECK(cuda::f32_to_bf16(a, n * kFfn, reinterpret_cast<uint16_t*>(out), stream));
    });
    add_row(fmt::format("rms_norm {}x{}", n, kHidden), 8.0 * nd * kHidden,
            [&] { CHECK(cuda::rms_norm(a, weight, 1e-6f, n, kHidden, out, stream)); });
    add_row(fmt::format("add + rms_norm + quantize_q8 {}x{}", n, kHidden),
            (12.0 + 4.0 + 1.125) * nd * kHidden, [&] {
              CHECK(cuda::add_rms_norm_q8(a, b, out, weight, 1e-6f, n, kHidden, out + most / 2,
                                          b + most / 2, 32, stream));
            });
    add_row(fmt::format("quantize_q8 {}x{}", n, kHidden), (4.0 + 1.125) * nd * kHidden,
            [&] { CHECK(cuda::quantize_q8(a, n, kHidden, 32, out, stream)); });
    add_row(fmt::format("rope {}x{}x{}", n, kHeads, kHeadDim), 8.0 * nd * kHeads * kHeadDim, [&] {
      CHECK(cuda::rope(out, kHeadDim, kHeads, n, pos, inv_freq, kHeadDim, true, 1.0f, stream));
    });
    add_row(fmt::format("rms_norm + rope {}x{}x{}", n, kHeads, kHeadDim),
            8.0 * nd * kHeads * kHeadDim, [&] {
              cuda::NormRopeLaunch l;
              l.parts[0] = {out, weight, 1e-6f, kHeads};
              l.head_dim = kHeadDim, l.n = n, l.positions = pos, l.inv_freq = inv_freq;
              l.rotary_dim = kHeadDim, l.neox = true;
              CHECK(cuda::rms_norm_rope(l, stream));
            });
    // A layer's q and k heads (32 + 8) in one launch, as the decode and prefill steps run them.
    add_row(fmt::format("rms_norm + rope q+k {}x({}+{})x{}", n, kHeads, kHeads / 4, kHeadDim),
            8.0 * nd * (kHeads + kHeads / 4) * kHeadDim, [&] {
              cuda::NormRopeLaunch l;
              l.parts[0] = {out, weight, 1e-6f, kHeads};
              l.parts[1] = {out + n * kHeads * kHeadDim, weight, 1e-6f, kHeads / 4};
              l.count = 2;
              l.head_dim = kHeadDim, l.n = n, l.positions = pos, l.inv_freq = inv_freq;
              l.rotary_dim = kHeadDim, l.neox = true;
              CHECK(cuda::rms_norm_rope(l, stream));
            });
    add_row(fmt::format("silu_mul {}x{}", n, kFfn), 12.0 * nd * kFfn,
            [&] { CHECK(cuda::silu_mul(a, b, out, n * kFfn, stream)); });
    add_row(fmt::format("add {}x{}", n, kHidden), 12.0 * nd * kHidden,
            [&] { CHECK(cuda::add(a, b, out, n * kHidden, stream)); });
    add_row(fmt::format("get_rows Q4_K {} of {}x{}", n, kTableRows, kHidden),
            nd * (static_cast<double>(q4k_row) + 4.0 * kHidden), [&] {
              CHECK(cuda::get_rows(TensorType::Q4_K, dtable, kTableRows, kHidden, dids, n, out,
                                   stream));
            });
  }
  for (int64_t n : {int64_t{1}, int64_t{8}}) {
    add_row(fmt::format("argmax_rows {}x{}", n, kVocab), 4.0 * static_cast<double>(n * kVocab),
            [&] { CHECK(cuda::argmax_rows(a, n, kVocab, argmax_ids, stream)); });
  }
  CHECK(cudaStreamSynchronize(stream));
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(out),
                  static_cast<void*>(weight), static_cast<void*>(pos), static_cast<void*>(inv_freq),
                  dtable, static_cast<void*>(dids), static_cast<void*>(argmax_ids)})
    CHECK(cudaFree(p));
}

int run(bool quick, bool decode, bool attention_only, bool elementwise) {
  auto dev = CudaDevice::create(0);
  if (!dev) {
    fmt::print(stderr, "error: {}\n", dev.error().message);
    return 1;
  }
  CudaDevice& d = **dev;
  d.set_graphs(false);  // kernels are timed in graphs of their own below
  auto stream = static_cast<cudaStream_t>(d.stream());
  fmt::print("{}\n", d.name());
  std::vector<Row> rows;

  // Copy bandwidth: 2 GiB device to device, read + written.
  const size_t copy_bytes = size_t{1} << 31;
  void *src = nullptr, *dst = nullptr;
  CHECK(cudaMalloc(&src, copy_bytes));
  CHECK(cudaMalloc(&dst, copy_bytes));
  CHECK(cudaMemsetAsync(src, 1, copy_bytes, stream));
  const double copy_ms = time_ms(stream, 10, [&] {
    CHECK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_gbs = 2.0 * static_cast<double>(copy_bytes) / (copy_ms * 1e6);
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
  fmt::print("copy: {:.3f} ms for 2 x {} GiB: {:.0f} GB/s\n", copy_ms, copy_bytes >> 30, copy_gbs);
  rows.push_back({"device-to-device copy 2 GiB", copy_ms, copy_ms, copy_gbs, 1.0});
  if (elementwise) {
    time_elementwise(stream, copy_gbs, rows);
    print_table(rows);
    return 0;
  }

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<TensorType> types =
      decode ? std::vector<TensorType>{TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0}
             : std::vector<TensorType>{TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0,
                                       TensorType::Q5_K, TensorType::Q4_0, TensorType::BF16,
                                       TensorType::F16};
  struct Shape {
    int64_t m, k;
  };
  const std::vector<Shape> shapes =
      quick ? std::vector<Shape>{{12288, 4096}}
            : std::vector<Shape>{{4096, 4096}, {12288, 4096}, {4096, 12288}, {1024, 4096}};
  std::vector<DeviceBuffer> keep;
  auto upload = [&](const void* p, size_t bytes) {
    auto b = d.allocate(bytes);
    if (!b) std::exit(1);
    d.upload(p, b->data(), bytes);
    void* data = b->data();
    keep.push_back(std::move(*b));
    return data;
  };
  for (TensorType type : attention_only ? std::vector<TensorType>{} : types) {
    for (const Shape& s : shapes) {
      auto w = random_weights(type, s.m, s.k, rng);
      // Copies of the weights, used in turn, so that together they outgrow the 60 MB L2 and every
      // product reads its weights from memory, as in a forward pass.
      const size_t copies = std::min<size_t>(128, (size_t{256} << 20) / w.size() + 1);
      std::vector<void*> wcopies;
      for (size_t c = 0; c < copies; ++c) wcopies.push_back(upload(w.data(), w.size()));
      size_t turn = 0;
      Tensor tw;
      tw.data = wcopies[0];
      tw.type = type;
      tw.ne = {s.k, s.m, 1, 1};
      for (int64_t n : {1, 8, 512}) {
        if ((quick && n == 8) || (decode && n != 1)) continue;
        std::vector<float> x(static_cast<size_t>(n * s.k));
        for (auto& v : x) v = normal(rng);
        Tensor tx, ty;
        tx.data = upload(x.data(), x.size() * 4);
        tx.ne = {s.k, n, 1, 1};
        auto yb = d.allocate(static_cast<size_t>(n * s.m) * 4);
        ty.data = yb->data();
        ty.ne = {s.m, n, 1, 1};
        for (bool int8 : {true, false}) {
          const bool quant = tensor_type_info(type).block_elements > 1;
          if (!int8 && (!quant || n > 8 || decode)) continue;
          d.set_int8_gemv(int8);
          auto product = [&] {
            tw.data = wcopies[turn++ % copies];
            (void)d.matmul(tw, tx, ty);
          };
          const double eager = time_ms(stream, 20, product);
          const double ms = graph_ms(stream, 32, product);
          const double bytes = static_cast<double>(w.size());
          const double gbs = bytes / (ms * 1e6);
          std::string what = fmt::format("matmul {} {}x{} n={}{}", tensor_type_name(type), s.m, s.k,
                                         n, n <= 8 && quant ? (int8 ? " q8" : " f32") : "");
          if (n > 8) {
            const double tflops = 2.0 * static_cast<double>(s.m * s.k * n) / (ms * 1e9);
            what += fmt::format(" ({:.0f} TFLOP/s)", tflops);
          }
          fmt::print("{}: {:.4f} ms ({:.4f} launched alone), {:.0f} GB/s of weights\n", what, ms,
                     eager, gbs);
          rows.push_back({what, eager, ms, gbs, gbs / copy_gbs});
        }
        d.set_int8_gemv(true);
        keep.push_back(std::move(*yb));
      }
      if (!d.synchronize()) return 1;
    }
  }

  // Decode attention: one token, 32 heads over 8 KV heads of 128, F16 cache.
  const std::vector<int64_t> contexts = attention_only
                                            ? std::vector<int64_t>{512, 4096, 16384, 32768}
                                            : std::vector<int64_t>{512, 1024, 16384};
  const int64_t heads = 32, kv_heads = 8, hd = 128, bs = 16;
  // An F16 cache layer of `positions` keys (random, the same bytes for K and V) and its block
  // table, on the device.
  auto cache_layer = [&](int64_t positions, std::vector<int32_t>& table) {
    const int64_t blocks = positions / bs + 1;
    const size_t cache_bytes = static_cast<size_t>(blocks * bs * kv_heads * hd) * 2;
    std::vector<uint16_t> kv(cache_bytes / 2);
    for (auto& v : kv) v = float_to_fp16(normal(rng));
    KvLayer layer;
    layer.block_size = bs;
    layer.kv_heads = kv_heads;
    layer.head_dim = hd;
    layer.k.type = layer.v.type = TensorType::F16;
    layer.k.data = upload(kv.data(), cache_bytes);
    layer.v.data = upload(kv.data(), cache_bytes);
    table.resize(static_cast<size_t>(blocks));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    return layer;
  };
  for (int64_t context : contexts) {
    std::vector<int32_t> table;
    const KvLayer layer = cache_layer(context, table);
    std::vector<float> q(static_cast<size_t>(heads * hd));
    for (auto& v : q) v = normal(rng);
    Tensor tq, to;
    tq.data = upload(q.data(), q.size() * 4);
    tq.ne = {hd, heads, 1, 1};
    to.data = upload(q.data(), q.size() * 4);
    to.ne = tq.ne;
    AttentionSequence seq;
    seq.first_token = 0;
    seq.token_count = 1;
    seq.first_position = context - 1;
    seq.block_table = table;
    AttentionParams p;
    p.scale = 0.088f;
    const double eager = time_ms(stream, 20, [&] { d.attention(tq, layer, {&seq, 1}, p, to); });
    const double ms = graph_ms(stream, 20, [&] { d.attention(tq, layer, {&seq, 1}, p, to); });
    const double bytes = 2.0 * static_cast<double>(context * kv_heads * hd * 2);
    const double gbs = bytes / (ms * 1e6);
    const std::string what =
        fmt::format("attention decode ctx {} (32/8 heads of 128, F16)", context);
    fmt::print("{}: {:.4f} ms, {:.0f} GB/s of KV\n", what, ms, gbs);
    rows.push_back({what, eager, ms, gbs, gbs / copy_gbs});
  }
  if (!d.synchronize()) return 1;

  // Prefill attention: 512 new tokens after 1K and 16K tokens of context (the same heads), the
  // tensor-core prefill kernel (attention_prefill.cu; TERN_CUDA_ATTN_PREFILL picks its variant).
  // TFLOP/s counts the QK and PV products once (the split-f16 halves double the mma work).
  for (int64_t context :
       attention_only ? std::vector<int64_t>{1024, 16384} : std::vector<int64_t>{}) {
    const int64_t fresh = 512;
    std::vector<int32_t> table;
    const KvLayer layer = cache_layer(context + fresh, table);
    std::vector<float> q(static_cast<size_t>(fresh * heads * hd));
    for (auto& v : q) v = normal(rng);
    Tensor tq, to;
    tq.data = upload(q.data(), q.size() * 4);
    tq.ne = {hd, heads, fresh, 1};
    to.data = upload(q.data(), q.size() * 4);
    to.ne = tq.ne;
    AttentionSequence seq;
    seq.first_token = 0;
    seq.token_count = fresh;
    seq.first_position = context;
    seq.block_table = table;
    AttentionParams p;
    p.scale = 0.088f;
    const double eager = time_ms(stream, 5, [&] { d.attention(tq, layer, {&seq, 1}, p, to); });
    const double ms = graph_ms(stream, 5, [&] { d.attention(tq, layer, {&seq, 1}, p, to); });
    const double scores = static_cast<double>(fresh) * static_cast<double>(context) +
                          0.5 * static_cast<double>(fresh * (fresh + 1));
    const double tflops = 4.0 * scores * static_cast<double>(heads * hd) / (ms * 1e9);
    const double bytes = 2.0 * static_cast<double>((context + fresh) * kv_heads * hd * 2);
    const double gbs = bytes / (ms * 1e6);
    const std::string what = fmt::format(
        "attention prefill 512 after {} (32/8 heads of 128, F16): {:.0f} TFLOP/s", context, tflops);
    fmt::print("{}: {:.4f} ms\n", what, ms);
    rows.push_back({what, eager, ms, gbs, gbs / copy_gbs});
  }
  if (!d.synchronize()) return 1;

  print_table(rows);
  return 0;
}

}  // namespace
}  // namespace tern

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool decode = argc > 1 && std::strcmp(argv[1], "--decode") == 0;
  const bool attention = argc > 1 && std::strcmp(argv[1], "--attention") == 0;
  const bool elementwise = argc > 1 && std::strcmp(argv[1], "--elementwise") == 0;
  if (argc > 2 || (argc > 1 && !quick && !decode && !attention && !elementwise)) {
    std::fprintf(stderr,
                 "usage: tern-cuda-bench [--quick | --decode | --attention | --elementwise]\n");
    return 2;
  }
  return tern::run(quick, decode, attention, elementwise);
}
