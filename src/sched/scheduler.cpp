#include "sched/scheduler.h"

#include <algorithm>

#include "sched/step.h"

namespace tern {

Scheduler::Scheduler(Model& model, KvCache& cache, SchedulerOptions options)
    : model_(model), cache_(cache), options_(options) {}

Scheduler::~Scheduler() {
  for (auto& s : running_) cache_.release(s.kv);
  for (auto& c : cached_) cache_.release(c.kv);
}

uint64_t Scheduler::add(SequenceRequest request) {
  Sequence seq;
  seq.id = next_id_++;
  seq.tokens = std::move(request.prompt);
  seq.prompt_tokens = static_cast<int64_t>(seq.tokens.size());
  seq.sampler = std::make_unique<Sampler>(std::move(request.sampling));
  seq.constraint = std::move(request.constraint);
  seq.needs_logits = request.needs_logits;
  seq.score_prompt = request.score_prompt;
  seq.max_tokens = request.max_tokens;
  seq.hooks = std::move(request.hooks);
  waiting_.push_back(std::move(seq));
  return waiting_.back().id;
}

void Scheduler::cancel_all() {
  for (auto& s : waiting_) {
    if (s.hooks.on_finish) s.hooks.on_finish(SequenceEnd::Cancelled, nullptr);
  }
  waiting_.clear();
  while (!running_.empty()) finish(running_.begin(), SequenceEnd::Cancelled, nullptr);
}

bool Scheduler::reserve(SequenceKv& kv, int64_t positions) {
  while (!cache_.reserve(kv, positions)) {
    if (cached_.empty()) return false;
    cache_.release(cached_.back().kv);  // evict the least recently used cached sequence
    cached_.pop_back();
  }
  return true;
}

// Takes over the blocks of the cached sequence sharing the longest prefix with `seq`.
void Scheduler::adopt_cached_prefix(Sequence& seq) {
  auto best = cached_.end();
  size_t best_common = 0;
  for (auto it = cached_.begin(); it != cached_.end(); ++it) {
    size_t common = 0;
    // At least two prompt tokens are computed again: the last one for its logits, and two so that
    // they go through the same multi-row kernels as a fresh prefill did (the CPU's n = 1 kernels
    // round differently), so a repeated seeded request samples what the first one did.
    const size_t recomputed = std::min<size_t>(2, seq.tokens.size());
    const size_t limit = std::min(it->tokens.size(), seq.tokens.size() - recomputed);
    while (common < limit && it->tokens[common] == seq.tokens[common]) ++common;
    if (common > best_common) {
      best_common = common;
      best = it;
    }
  }
  if (best == cached_.end()) return;
  seq.kv = std::move(best->kv);
  seq.kv.length = static_cast<int64_t>(best_common);
  // Blocks past the shared prefix go back to the pool.
  const auto keep =
      static_cast<size_t>((best_common + static_cast<size_t>(cache_.config().block_size) - 1) /
                          static_cast<size_t>(cache_.config().block_size));
  SequenceKv tail;
  tail.blocks.assign(seq.kv.blocks.begin() + static_cast<long>(keep), seq.kv.blocks.end());
  seq.kv.blocks.resize(keep);
  cache_.release(tail);
  cached_.erase(best);
  seq.reused = static_cast<int64_t>(best_common);
}

void Scheduler::admit() {
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_running) {
    Sequence seq = std::move(waiting_.front());
    waiting_.pop_front();
    if (!seq.score_prompt) adopt_cached_prefix(seq);
    if (seq.hooks.on_admitted) seq.hooks.on_admitted(seq.reused);
    running_.push_back(std::move(seq));
  }
}

void Scheduler::finish(std::list<Sequence>::iterator it, SequenceEnd end, const Error* error) {
  if (it->hooks.on_finish) it->hooks.on_finish(end, error);
  if (options_.prefix_cache && error == nullptr && it->kv.length > 0) {
    // Keep what was computed for a later request with the same prefix.
    Cached c;
    c.tokens.assign(it->tokens.begin(), it->tokens.begin() + it->kv.length);
    c.kv = std::move(it->kv);
    cached_.push_front(std::move(c));
  } else {
    cache_.release(it->kv);
  }
  running_.erase(it);
}

void Scheduler::step() {
  admit();
  // Cancelled sequences end before any work is spent on them.
  for (auto it = running_.begin(); it != running_.end();) {
    auto next = std::next(it);
    if (it->hooks.cancelled && it->hooks.cancelled()) finish(it, SequenceEnd::Cancelled, nullptr);
    it = next;
  }
  if (running_.empty()) return;

  // Decoding sequences (one token to compute) first, so that prefill never starves them; then
  // prefill chunks from what is left of the budget.
  struct Planned {
    std::list<Sequence>::iterator seq;
    int64_t count;
  };
  std::vector<Planned> plan;
  int64_t budget = options_.step_tokens;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto it = running_.begin(); it != running_.end() && budget > 0; ++it) {
      const int64_t todo = static_cast<int64_t>(it->tokens.size()) - it->kv.length;
      const bool decoding = todo == 1;
      if ((pass == 0) != decoding || todo <= 0) continue;
      const int64_t n = std::min(todo, budget);
      plan.push_back({it, n});
      budget -= n;
    }
  }
  std::vector<SequenceBatch> batch;
  std::vector<RowSampling> sampling;  // one per logit row (Model::forward's order)
  std::vector<std::list<Sequence>::iterator> failed;
  const int64_t vocab = model_.shape().vocab;
  for (auto& p : plan) {
    Sequence& s = *p.seq;
    if (!reserve(s.kv, s.kv.length + p.count)) {
      failed.push_back(p.seq);
      continue;
    }
    SequenceBatch b;
    b.tokens =
        std::span(s.tokens).subspan(static_cast<size_t>(s.kv.length), static_cast<size_t>(p.count));
    b.kv = &s.kv;
    b.logits_for_all = s.score_prompt;
    b.last_logits = s.kv.length + p.count == static_cast<int64_t>(s.tokens.size());
    if (s.score_prompt) {
      sampling.insert(sampling.end(), static_cast<size_t>(p.count), RowSampling::scored());
    } else if (b.last_logits) {
      RowSampling r = s.sampler->next_row(s.tokens);
      if (s.constraint) r.allowed = allowed_tokens(*s.constraint, vocab);
      r.return_row = s.needs_logits;
      sampling.push_back(std::move(r));
    }
    batch.push_back(b);
  }
  for (auto it : failed) {
    Error e{"the KV cache has no room for this request; lower --parallel or raise --ctx"};
    std::erase_if(plan, [&](const Planned& p) { return p.seq == it; });
    finish(it, SequenceEnd::Finished, &e);
  }
  if (batch.empty()) return;

  auto out = run_step(model_, cache_, batch, sampling);
  if (!out) {
    for (auto& p : plan) finish(p.seq, SequenceEnd::Finished, &out.error());
    return;
  }
  const auto row_size = static_cast<size_t>(vocab);
  size_t row = 0, returned = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    auto it = plan[i].seq;
    if (it->score_prompt) {  // every token's row; the sequence ends with its prompt
      const size_t n = batch[i].tokens.size();
      it->hooks.on_prompt_logits(
          std::span<const float>(out->rows.data() + returned * row_size, n * row_size));
      row += n;
      returned += n;
      if (batch[i].last_logits) finish(it, SequenceEnd::Finished, nullptr);
      continue;
    }
    if (!batch[i].last_logits) continue;
    const int32_t token = out->tokens[row];
    std::span<const float> l;
    if (sampling[row].return_row) {
      l = std::span<const float>(out->rows.data() + returned * row_size, row_size);
      ++returned;
    }
    ++row;
    if (it->constraint) it->constraint->accept(token);
    const bool more = it->hooks.on_token(token, l);
    it->tokens.push_back(token);
    const int64_t generated = static_cast<int64_t>(it->tokens.size()) - it->prompt_tokens;
    const bool context_full = static_cast<int64_t>(it->tokens.size()) >= options_.context;
    if (!more || generated >= it->max_tokens || context_full) {
      // The sampled token was never computed: it is not part of the cached prefix.
      const bool by_context = context_full && more && generated < it->max_tokens;
      finish(it, by_context ? SequenceEnd::ContextFull : SequenceEnd::Finished, nullptr);
    }
  }
}

}  // namespace tern
