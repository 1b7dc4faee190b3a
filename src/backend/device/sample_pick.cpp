#include "backend/device/sample_pick.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace tern {
namespace {

// The largest logit: eight independent running maxima, which the compiler keeps in one vector
// register (std::max_element's single dependent chain runs ~4x slower over a vocabulary).
float max_of(std::span<const float> v) {
  float m[8];
  std::fill(m, m + 8, v[0]);
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    for (size_t j = 0; j < 8; ++j) m[j] = v[i + j] > m[j] ? v[i + j] : m[j];
  }
  for (; i < v.size(); ++i) m[0] = v[i] > m[0] ? v[i] : m[0];
  return *std::max_element(m, m + 8);
}

// exp(x) for a logit's scaled distance below the maximum (x <= 0): float precision is plenty for
// a probability, and the float exp is twice as fast as the double one over a vocabulary.
double weight_of(float logit, float max_logit, float inv_t) {
  return static_cast<double>(std::exp((logit - max_logit) * inv_t));
}

// Candidates in descending logit order (ties: the lower id first), ordered only as far as a
// caller reads: the vocabulary is taken in bands of logits below the maximum (4 decades of
// weight each), and within a band the next few hundred are selected (nth_element) and sorted when
// first needed. A temperature-sampled token almost always comes from the first few hundred, so a
// step costs a few passes over the logits instead of a sort of the whole vocabulary (which took
// 44 ms a token for 151,936 logits; bench/sample/sampler_bench.cpp).
class SortedCandidates {
 public:
  SortedCandidates(std::span<const float> logits, float max_logit, float temperature)
      : logits_(logits),
        max_logit_(max_logit),
        band_width_(static_cast<double>(temperature) * std::log(1e4)) {}

  // Only the k best are wanted (top-k): a partial sort of the whole vocabulary, once.
  void keep_best(size_t k) {
    order_.resize(logits_.size());
    std::iota(order_.begin(), order_.end(), 0);
    const float* l = logits_.data();
    std::partial_sort(order_.begin(), order_.begin() + static_cast<long>(k), order_.end(),
                      [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    order_.resize(k);
    sorted_ = k;
  }
  // Candidate i (its id); i < the vocabulary's size (below k after keep_best(k)).
  int32_t at(size_t i) {
    while (i >= sorted_) {
      if (sorted_ == order_.size()) {
        add_band();
      } else {
        sort_more();
      }
    }
    return order_[i];
  }

 private:
  static constexpr int kBands = 4;  // the last band takes everything below the third
  static constexpr size_t kFirstChunk = 256;

  bool before(int32_t a, int32_t b) const {
    const float la = logits_[static_cast<size_t>(a)], lb = logits_[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  }
  void add_band() {
    const double upper = max_logit_ - band_width_ * bands_;
    const double lower = max_logit_ - band_width_ * (bands_ + 1);
    const bool last = bands_ + 1 >= kBands;
    for (size_t i = 0; i < logits_.size(); ++i) {
      const double l = logits_[i];
      // The last band: everything the others left (NaN too, which no model produces).
      const bool in_band =
          last ? bands_ == 0 || !(l >= upper) : l >= lower && (bands_ == 0 || l < upper);
      if (in_band) order_.push_back(static_cast<int32_t>(i));
    }
    band_start_ = sorted_;
    ++bands_;
  }
  // Orders the next chunk of the current band: twice what it has ordered so far, at least 256.
  void sort_more() {
    const auto cmp = [this](int32_t a, int32_t b) { return before(a, b); };
    const size_t chunk = std::max(kFirstChunk, sorted_ - band_start_);
    const size_t end = std::min(order_.size(), sorted_ + chunk);
    auto first = order_.begin() + static_cast<long>(sorted_);
    auto middle = order_.begin() + static_cast<long>(end);
    if (middle != order_.end()) std::nth_element(first, middle, order_.end(), cmp);
    std::sort(first, middle, cmp);
    sorted_ = end;
  }

  std::span<const float> logits_;
  double max_logit_, band_width_;
  int bands_ = 0;
  std::vector<int32_t> order_;  // the bands taken so far, [0, sorted_) in final order
  size_t sorted_ = 0, band_start_ = 0;
};

}  // namespace

int32_t pick_token(std::span<const float> logits, const SampleDraw& draw) {
  const float max_logit = max_of(logits);
  const float inv_t = 1.0f / draw.temperature;
  auto weight = [&](int32_t id) {
    return weight_of(logits[static_cast<size_t>(id)], max_logit, inv_t);
  };
  SortedCandidates order(logits, max_logit, draw.temperature);
  // top-k: the k best; the probabilities are normalized over them. Otherwise over everything.
  const size_t vocab = logits.size();
  size_t keep = vocab;
  double total = 0.0;
  if (draw.top_k > 0 && static_cast<size_t>(draw.top_k) < vocab) {
    keep = static_cast<size_t>(draw.top_k);
    order.keep_best(keep);
    for (size_t i = 0; i < keep; ++i) total += weight(order.at(i));
  } else {
    for (float l : logits) total += weight_of(l, max_logit, inv_t);
  }
  // min-p (below min_p times the top probability) and top-p (the smallest prefix whose mass
  // reaches top_p) cut the sorted candidates further.
  size_t end = keep;
  double kept = 1.0;  // the mass of candidates [0, end)
  if (draw.min_p > 0.0f || draw.top_p < 1.0f) {
    const double floor = weight(order.at(0)) / total * static_cast<double>(draw.min_p);
    double mass = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      const double p = weight(order.at(i)) / total;
      if (draw.min_p > 0.0f && p < floor) {
        end = i;
        break;
      }
      mass += p;
      if (draw.top_p < 1.0f && mass >= static_cast<double>(draw.top_p)) {
        end = i + 1;
        break;
      }
    }
    kept = mass;
  }
  // One uniform draw, walked down the sorted candidates (inverse CDF).
  const double target = draw.uniform * kept;
  double cumulative = 0.0;
  for (size_t i = 0; i < end; ++i) {
    cumulative += weight(order.at(i)) / total;
    if (target < cumulative) return order.at(i);
  }
  return order.at(end - 1);  // rounding left the draw past the last candidate's share
}

}  // namespace tern
