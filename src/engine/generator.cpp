#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "sample/stop_matcher.h"
#include "sched/step.h"

namespace tern {

Generator::Generator(LoadedModel& model) : m_(model) {}

Generator::~Generator() {
  m_.cache->release(seq_);
}

void Generator::reset() {
  m_.cache->release(seq_);
  cached_.clear();
}

Result<void> Generator::feed(std::span<const int32_t> tokens, int64_t chunk, bool all_logits,
                             std::vector<float>& logits, const RowSampling* pick, int32_t* picked) {
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(chunk)) {
    const size_t n = std::min(static_cast<size_t>(chunk), tokens.size() - at);
    if (!m_.cache->reserve(seq_, seq_.length + static_cast<int64_t>(n))) {
      return make_error("the KV cache is full ({} tokens); raise --ctx",
                        m_.cache->capacity_tokens());
    }
    const bool last = at + n == tokens.size();
    SequenceBatch batch{tokens.subspan(at, n), &seq_, all_logits};
    batch.last_logits = all_logits || (last && pick != nullptr);
    std::vector<RowSampling> rows;
    if (all_logits) rows.assign(n, RowSampling::scored());
    if (last && pick != nullptr) {
      if (all_logits) rows.pop_back();
      rows.push_back(*pick);
    }
    auto out = run_step(*m_.model, *m_.cache, {&batch, 1}, rows);
    if (!out) return out.error();
    cached_.insert(cached_.end(), tokens.begin() + static_cast<long>(at),
                   tokens.begin() + static_cast<long>(at + n));
    logits.insert(logits.end(), out->rows.begin(), out->rows.end());
    if (last && pick != nullptr) *picked = out->tokens.back();
  }
  return {};
}

Result<std::vector<float>> Generator::logits_for(std::span<const int32_t> tokens) {
  reset();
  std::vector<float> logits;
  TERN_TRY(feed(tokens, m_.prefill_chunk, true, logits));
  return logits;
}

Result<GenerateResult> Generator::generate(std::span<const int32_t> prompt,
                                           const GenerateOptions& options,
                                           const std::function<bool(const std::string&)>& on_text) {
  using Clock = std::chrono::steady_clock;
  if (prompt.empty()) return Error{"the prompt is empty"};
  const int64_t vocab = m_.model->shape().vocab;
  TERN_TRY(options.sampling.validate(vocab));
  if (static_cast<int64_t>(prompt.size()) >= m_.context) {
    return make_error(
        "the prompt has {} tokens but the context holds {}; shorten it or raise --ctx",
        prompt.size(), m_.context);
  }
  GenerateResult result;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());

  // Reuse the cached prefix; at least the last prompt token is recomputed for its logits.
  size_t common = 0;
  while (common < cached_.size() && common + 1 < prompt.size() && cached_[common] == prompt[common])
    ++common;
  cached_.resize(common);
  seq_.length = static_cast<int64_t>(common);
  result.reused_tokens = static_cast<int64_t>(common);

  Sampler sampler(options.sampling);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  // Every token is picked where the logits are (sample/'s ops in the step's plan).
  int32_t next_token = -1;
  RowSampling pick = sampler.next_row(history);
  auto start = Clock::now();
  std::vector<float> logits;
  const int64_t chunk = options.prefill_chunk > 0 ? options.prefill_chunk : m_.prefill_chunk;
  TERN_TRY(feed(prompt.subspan(common), chunk, false, logits, &pick, &next_token));
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  StopMatcher stops(options.stop);
  StreamingDetokenizer detok(*m_.tokenizer);
  auto decode_start = Clock::now();
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return true;
    result.text += piece;
    return !on_text || on_text(piece);
  };
  while (true) {
    if (static_cast<int64_t>(result.tokens.size()) >= options.max_tokens) {
      result.finish = FinishReason::Length;
      break;
    }
    const int32_t token = next_token;
    const bool end = !options.ignore_eos &&
                     (m_.tokenizer->is_end_of_generation(token) ||
                      std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) !=
                          options.stop_tokens.end());
    if (end) {
      result.finish = FinishReason::Stop;
      break;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    auto out = stops.push(detok.push(token));
    if (!emit(out.text)) {
      result.finish = FinishReason::Cancelled;
      break;
    }
    if (out.stopped) {
      result.finish = FinishReason::Stop;
      break;
    }
    if (seq_.length + 1 >= m_.context) {
      result.finish = FinishReason::Length;
      break;
    }
    if (static_cast<int64_t>(result.tokens.size()) >= options.max_tokens) {
      result.finish = FinishReason::Length;
      break;
    }
    const int32_t next[1] = {token};
    pick = sampler.next_row(history);
    TERN_TRY(feed(next, 1, false, logits, &pick, &next_token));
  }
  if (result.finish != FinishReason::Cancelled) {
    auto tail = stops.push(detok.finish());
    emit(tail.text);
    emit(stops.flush());
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - decode_start).count();
  return result;
}

}  // namespace tern
