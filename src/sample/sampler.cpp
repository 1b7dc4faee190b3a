#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "backend/device/sample_pick.h"

namespace tern {

Result<void> SamplingParams::validate(int64_t vocab) const {
  if (!(temperature >= 0.0f) || temperature > 100.0f) {
    return make_error("temperature must be between 0 and 100, got {}", temperature);
  }
  if (top_k < 0) return make_error("top_k must be >= 0, got {}", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return make_error("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return make_error("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0.0f)) {
    return make_error("repetition_penalty must be > 0, got {}", repetition_penalty);
  }
  if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty)) {
    return make_error("presence and frequency penalties must be finite");
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab)
      return make_error("logit_bias names token {} outside the vocabulary of {}", id, vocab);
    if (!std::isfinite(bias) && bias != -INFINITY)
      return make_error("logit_bias for token {} is not a number", id);
  }
  return {};
}

Sampler::Sampler(SamplingParams params) : params_(std::move(params)) {
  rng_.seed(params_.seed ? *params_.seed : std::random_device{}());
}

void Sampler::apply_penalties(std::vector<float>& logits, std::span<const int32_t> history) const {
  const bool any = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                   params_.frequency_penalty != 0.0f;
  if (any) {
    size_t begin = 0;
    if (params_.penalty_window > 0 &&
        history.size() > static_cast<size_t>(params_.penalty_window)) {
      begin = history.size() - static_cast<size_t>(params_.penalty_window);
    }
    std::unordered_map<int32_t, int32_t> counts;
    for (size_t i = begin; i < history.size(); ++i) {
      if (history[i] >= 0 && static_cast<size_t>(history[i]) < logits.size()) ++counts[history[i]];
    }
    for (const auto& [id, count] : counts) {
      float& l = logits[static_cast<size_t>(id)];
      if (params_.repetition_penalty != 1.0f) {
        l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
      }
      l -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
    }
  }
  for (const auto& [id, bias] : params_.logit_bias) {
    if (static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] += bias;
  }
}

bool Sampler::changes_logits() const {
  return params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
         params_.frequency_penalty != 0.0f || !params_.logit_bias.empty();
}

bool Sampler::plain_greedy() const {
  return params_.temperature == 0.0f && !changes_logits();
}

int32_t Sampler::sample(std::span<const float> raw, std::span<const int32_t> history) {
  if (plain_greedy()) {  // no copy of the row: the first index of the maximum
    return static_cast<int32_t>(std::max_element(raw.begin(), raw.end()) - raw.begin());
  }
  // Penalties and bias change a copy; without them the row is read where it is.
  std::vector<float> changed;
  std::span<const float> logits = raw;
  if (changes_logits()) {
    changed.assign(raw.begin(), raw.end());
    apply_penalties(changed, history);
    logits = changed;
  }
  if (params_.temperature == 0.0f) {
    // Greedy: the first index of the maximum, as every engine breaks ties.
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return pick_token(logits, draw());
}

RowSampling Sampler::next_row(std::span<const int32_t> history) {
  RowSampling r;
  r.greedy = params_.temperature == 0.0f;
  if (!r.greedy) r.draw = draw();
  const bool any = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                   params_.frequency_penalty != 0.0f;
  if (any) {
    // apply_penalties's counts, in the same order of tokens (the ops apply them in turn).
    size_t begin = 0;
    if (params_.penalty_window > 0 &&
        history.size() > static_cast<size_t>(params_.penalty_window)) {
      begin = history.size() - static_cast<size_t>(params_.penalty_window);
    }
    std::unordered_map<int32_t, int32_t> counts;
    for (size_t i = begin; i < history.size(); ++i) {
      if (history[i] >= 0) ++counts[history[i]];
    }
    for (const auto& [id, count] : counts) {
      if (params_.repetition_penalty != 1.0f) r.repeated.push_back(id);
      if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
        r.penalized.push_back(id);
        r.penalties.push_back(
            -(params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count)));
      }
    }
    r.repetition_penalty = params_.repetition_penalty;
  }
  for (const auto& [id, bias] : params_.logit_bias) {
    r.biased.push_back(id);
    r.biases.push_back(bias);
  }
  return r;
}

std::vector<uint32_t> allowed_tokens(TokenConstraint& constraint, int64_t vocab) {
  std::vector<float> probe(static_cast<size_t>(vocab), 0.0f);
  constraint.apply(probe);
  std::vector<uint32_t> bits(static_cast<size_t>((vocab + 31) / 32), 0u);
  for (size_t t = 0; t < probe.size(); ++t) {
    if (probe[t] != -INFINITY) bits[t / 32] |= 1u << (t % 32);
  }
  return bits;
}

SampleDraw Sampler::draw() {
  return {params_.temperature, params_.top_k, params_.top_p, params_.min_p, next_uniform()};
}

double Sampler::next_uniform() {
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

std::vector<float> Sampler::log_softmax(std::span<const float> logits) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l - max_logit));
  const float log_total = static_cast<float>(std::log(total)) + max_logit;
  std::vector<float> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_total;
  return out;
}

}  // namespace tern
