// A sequential mirror of src/backend/cuda/sample.cu's walk_kernel (chunks of 1,024 "threads",
// inclusive scans per chunk, the min-reduction of the candidate codes, the carried mass) checked
// against pick_token on rows of 700-49,152 logits with ties and every cut, chunk boundaries
// crossed. A check of the kernel's bookkeeping for whoever edits it, not of the kernel (that is
// cuda_device_test SampleRowsPicksWhatTheHostPicks on the GPU). Build and run from the repository:
//   g++ -O2 -std=c++20 -Isrc tools/cuda/check_sample_walk.cpp src/backend/device/sample_pick.cpp
//     -o /tmp/check_sample_walk && /tmp/check_sample_walk
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>
#include "backend/device/sample_pick.h"
using namespace tern;
constexpr int T = 1024;
int32_t walk(const std::vector<float>& sorted, const std::vector<int32_t>& ids,
             const SampleDraw& d) {
  const int64_t n = sorted.size();
  const float m = sorted[0];
  const float inv_t = 1.0f / d.temperature;
  auto weight = [&](int64_t i) { return static_cast<double>(expf((sorted[i] - m) * inv_t)); };
  const int64_t keep = d.top_k > 0 && d.top_k < n ? d.top_k : n;
  std::vector<double> part(T, 0.0);
  for (int tid = 0; tid < T; ++tid)
    for (int64_t i = tid; i < keep; i += T) part[tid] += weight(i);
  double total = 0;
  for (double p : part) total += p;
  const int64_t kNone = INT64_MAX;
  int64_t end = keep;
  double kept = 1.0;
  if (d.min_p > 0 || d.top_p < 1) {
    const double floor = 1.0 / total * d.min_p;
    double carry = 0;
    bool cut = false;
    for (int64_t base = 0; base < keep && !cut; base += T) {
      std::vector<double> p(T), incl(T);
      double run = 0;
      for (int tid = 0; tid < T; ++tid) {
        int64_t i = base + tid;
        p[tid] = i < keep ? weight(i) / total : 0.0;
        run += p[tid];
        incl[tid] = run + carry;
      }
      int64_t found = kNone;
      for (int tid = 0; tid < T; ++tid) {
        int64_t i = base + tid, c = kNone;
        if (i < keep) {
          if (d.min_p > 0 && p[tid] < floor)
            c = 2 * i;
          else if (d.top_p < 1 && incl[tid] >= d.top_p)
            c = 2 * i + 1;
        }
        found = std::min(found, c);
      }
      if (found != kNone) {
        int64_t at = found / 2;
        int tid = at - base;
        kept = found % 2 == 0 ? incl[tid] - p[tid] : incl[tid];
        end = at + found % 2;
        cut = true;
      } else
        carry = incl[T - 1];
    }
    if (!cut) kept = carry;
  }
  const double target = d.uniform * kept;
  double carry = 0;
  for (int64_t base = 0; base < end; base += T) {
    std::vector<double> incl(T);
    double run = 0;
    for (int tid = 0; tid < T; ++tid) {
      int64_t i = base + tid;
      double p = i < end ? weight(i) / total : 0.0;
      run += p;
      incl[tid] = run + carry;
    }
    for (int tid = 0; tid < T; ++tid) {
      int64_t i = base + tid;
      if (i < end && target < incl[tid]) return ids[i];
    }
    carry = incl[T - 1];
  }
  return ids[end - 1];
}
int main() {
  std::mt19937 rng(3);
  int checked = 0, differ = 0;
  for (int vocab : {700, 5000, 49152})
    for (int trial = 0; trial < 16; ++trial) {
      std::normal_distribution<float> nd(0, trial % 2 ? 2.0f : 6.0f);
      std::vector<float> l(vocab);
      for (auto& x : l) x = std::round(nd(rng) * 4) / 4;
      std::vector<int32_t> ids(vocab);
      std::iota(ids.begin(), ids.end(), 0);
      std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return l[a] > l[b]; });
      std::vector<float> sorted(vocab);
      for (int i = 0; i < vocab; ++i) sorted[i] = l[ids[i]];
      SampleDraw d;
      d.temperature = trial % 3 ? 1.0f : 0.6f;
      d.top_k = trial % 4 == 1 ? 40 : (trial % 8 == 5 ? 3000 : 0);
      d.top_p = trial % 4 == 2 ? 0.9f : (trial % 8 == 7 ? 0.999f : 1.0f);
      d.min_p = trial % 4 == 3 ? 0.02f : 0.0f;
      std::uniform_real_distribution<double> u(0, 1);
      for (int rep = 0; rep < 50; ++rep) {
        d.uniform = u(rng);
        ++checked;
        if (walk(sorted, ids, d) != pick_token(l, d)) {
          ++differ;
          std::printf("differ vocab %d trial %d u %.17g\n", vocab, trial, d.uniform);
        }
      }
    }
  std::printf("%d draws, %d differ\n", checked, differ);
  return differ != 0;
}
