// sample_rows: temperature sampling where the logits are, with the host Sampler's arithmetic
// (backend/device/sample_pick.h): per row, CUB's radix sort orders the logits descending with
// their ids (stable, so equal logits keep the lower id first: the host's order), then one block
// walks the sorted row: the normalizer (over the top k, or everything), the min-p / top-p cut and
// the draw's inverse CDF, as block-wide scans of the probabilities in double. Only the token id
// travels back instead of a row of logits (600 KB for Qwen3) and a host pass over it.
// Reads the row once (sort: a few passes over 8 bytes a logit, all in L2), writes one id. Its
// roofline fraction is not measured apart: ~0.14 ms a token in the decode step (H100, Qwen3-8B
// Q4_K_M, tern bench --temp 1). cuda_device_test's SampleRowsPicksWhatTheHostPicks checks it
// against pick_token. The models use it unless TERN_CUDA_SAMPLE=0.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cuda/functional>

#include "backend/cuda/kernels.h"

namespace tern::cuda {
namespace {

constexpr int kWalkThreads = 1024;

__global__ void iota_kernel(int32_t* ids, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) ids[i] = static_cast<int32_t>(i);
}

// One sorted row (logits descending, their ids): the token `draw` picks, written to *id.
__global__ void __launch_bounds__(kWalkThreads)
    walk_kernel(const float* sorted, const int32_t* sorted_ids, int64_t n, const DrawParams* draw,
                int32_t* id) {
  using Reduce = cub::BlockReduce<double, kWalkThreads>;
  using Scan = cub::BlockScan<double, kWalkThreads>;
  using MinReduce = cub::BlockReduce<int64_t, kWalkThreads>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
    typename MinReduce::TempStorage min;
  } temp;
  __shared__ double shared_total, shared_carry, shared_kept;
  __shared__ int64_t shared_found;
  const DrawParams d = *draw;
  const int tid = static_cast<int>(threadIdx.x);
  const float max_logit = sorted[0];
  const float inv_t = 1.0f / d.temperature;
  const auto weight = [&](int64_t i) {
    return static_cast<double>(expf((sorted[i] - max_logit) * inv_t));
  };
  const int64_t keep = d.top_k > 0 && d.top_k < n ? d.top_k : n;
  // The normalizer over the kept candidates (the host sums the same weights in index order).
  double part = 0.0;
  for (int64_t i = tid; i < keep; i += kWalkThreads) part += weight(i);
  const double total_sum = Reduce(temp.reduce).Sum(part);
  if (tid == 0) shared_total = total_sum;
  __syncthreads();
  const double total = shared_total;
  constexpr int64_t kNone = INT64_MAX;

  // The kept prefix [0, end) and its mass: min-p stops before the first candidate below
  // min_p x the top probability, top-p after the first whose cumulative mass reaches top_p.
  int64_t end = keep;
  double kept = 1.0;
  if (d.min_p > 0.0f || d.top_p < 1.0f) {
    const double floor = 1.0 / total * static_cast<double>(d.min_p);  // the top weight is 1
    if (tid == 0) shared_carry = 0.0;
    __syncthreads();
    bool cut = false;
    for (int64_t base = 0; base < keep && !cut; base += kWalkThreads) {
      const int64_t i = base + tid;
      const double p = i < keep ? weight(i) / total : 0.0;
      double inclusive;
      Scan(temp.scan).InclusiveSum(p, inclusive);
      const double carry = shared_carry;
      inclusive += carry;
      int64_t candidate = kNone;
      if (i < keep) {
        if (d.min_p > 0.0f && p < floor) {
          candidate = 2 * i;  // end = i, kept = the mass before i
        } else if (d.top_p < 1.0f && inclusive >= static_cast<double>(d.top_p)) {
          candidate = 2 * i + 1;  // end = i + 1, kept = the mass through i
        }
      }
      __syncthreads();  // temp.scan is reused below
      const int64_t first = MinReduce(temp.min).Reduce(candidate, ::cuda::minimum<>{});
      if (tid == 0) shared_found = first;
      __syncthreads();
      const int64_t found = shared_found;
      if (found != kNone) {
        const int64_t at = found / 2;
        if (at == i) shared_kept = found % 2 == 0 ? inclusive - p : inclusive;
        end = at + found % 2;
        cut = true;
      } else if (tid == kWalkThreads - 1) {
        shared_carry = inclusive;
      }
      __syncthreads();
      if (cut) kept = shared_kept;
    }
    if (!cut) kept = shared_carry;  // nothing cut: the mass of every kept candidate
  }

  // The draw's inverse CDF over [0, end).
  const double target = d.uniform * kept;
  if (tid == 0) shared_carry = 0.0;
  __syncthreads();
  for (int64_t base = 0; base < end; base += kWalkThreads) {
    const int64_t i = base + tid;
    const double p = i < end ? weight(i) / total : 0.0;
    double inclusive;
    Scan(temp.scan).InclusiveSum(p, inclusive);
    inclusive += shared_carry;
    const int64_t candidate = i < end && target < inclusive ? i : kNone;
    __syncthreads();
    const int64_t first = MinReduce(temp.min).Reduce(candidate, ::cuda::minimum<>{});
    if (tid == 0) shared_found = first;
    __syncthreads();
    if (shared_found != kNone) {
      if (tid == 0) *id = sorted_ids[shared_found];
      return;
    }
    if (tid == kWalkThreads - 1) shared_carry = inclusive;
    __syncthreads();
  }
  if (tid == 0) *id = sorted_ids[end - 1];  // rounding left the draw past the last share
}

struct Workspace {
  float* keys;
  int32_t* ids_in;
  int32_t* ids_out;
  void* sort_temp;
  size_t sort_bytes;
};

size_t align256(size_t b) {
  return (b + 255) / 256 * 256;
}

size_t sort_temp_bytes(int64_t cols) {
  size_t bytes = 0;
  (void)cub::DeviceRadixSort::SortPairsDescending(
      nullptr, bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), cols);
  return bytes;
}

Workspace carve(void* workspace, int64_t cols) {
  auto* p = static_cast<char*>(workspace);
  const size_t row = align256(static_cast<size_t>(cols) * 4);
  Workspace w;
  w.keys = reinterpret_cast<float*>(p);
  w.ids_in = reinterpret_cast<int32_t*>(p + row);
  w.ids_out = reinterpret_cast<int32_t*>(p + 2 * row);
  w.sort_temp = p + 3 * row;
  w.sort_bytes = sort_temp_bytes(cols);
  return w;
}

}  // namespace

size_t sample_workspace_bytes(int64_t cols) {
  return 3 * align256(static_cast<size_t>(cols) * 4) + align256(sort_temp_bytes(cols));
}

cudaError_t sample_rows(const float* x, int64_t rows, int64_t cols, const DrawParams* draws,
                        int32_t* ids, void* workspace, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (cols <= 0 || cols > INT32_MAX) return cudaErrorInvalidValue;
  Workspace w = carve(workspace, cols);
  iota_kernel<<<static_cast<unsigned>((cols + 255) / 256), 256, 0, stream>>>(w.ids_in, cols);
  for (int64_t r = 0; r < rows; ++r) {
    size_t bytes = w.sort_bytes;
    cudaError_t e = cub::DeviceRadixSort::SortPairsDescending(
        w.sort_temp, bytes, x + r * cols, w.keys, w.ids_in, w.ids_out, cols, 0, 32, stream);
    if (e != cudaSuccess) return e;
    walk_kernel<<<1, kWalkThreads, 0, stream>>>(w.keys, w.ids_out, cols, draws + r, ids + r);
  }
  return cudaGetLastError();
}

}  // namespace tern::cuda
