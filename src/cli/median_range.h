// The median and range of repeated measurements, as `tern bench` and `tern bench compare` report
// them (BENCHMARKS.md: median [min-max]).
#pragma once

#include <algorithm>
#include <vector>

namespace tern::cli {

struct MedianRange {
  double median = 0, low = 0, high = 0;
};

// All zero for no measurements.
inline MedianRange median_range(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

}  // namespace tern::cli
