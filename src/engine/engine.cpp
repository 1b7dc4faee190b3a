#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <future>

#include <fmt/format.h>

#include "sample/stop_matcher.h"

namespace tern {

std::optional<Event> EventStream::next() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return !events_.empty() || final_taken_; });
  if (events_.empty()) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  if (e.type != Event::Type::Text) final_taken_ = true;
  return e;
}

void EventStream::push(Event event) {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    if (event.type != Event::Type::Text) closed_ = true;
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

Engine::Engine(LoadedModel& model, EngineOptions options)
    : model_(model),
      options_(options),
      scheduler_(
          *model.model, *model.cache,
          SchedulerOptions{options.parallel,
                           options.step_tokens > 0 ? options.step_tokens : model.prefill_chunk,
                           model.context, options.prefix_cache}) {
  update_gauges();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  shutdown();
}

void Engine::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

namespace {

// Per-request state shared by the scheduler's hooks: detokenizer, stop strings, the stream.
struct RequestState {
  RequestState(const Tokenizer& tok, std::vector<std::string> stops)
      : detok(tok), stop(std::move(stops)) {}
  StreamingDetokenizer detok;
  StopMatcher stop;
  std::shared_ptr<EventStream> stream;
  GenerateOptions options;
  int32_t top_logprobs = -1;
  Usage usage;
  Timing timing;
  bool sampled = false;  // a token came (timing.first_token is set)
  FinishReason finish = FinishReason::Stop;
  std::string stop_sequence;
  bool stopped_by_string = false;
};

TokenLogprob logprob_of(const Tokenizer& tok, int32_t id, const std::vector<float>& logprobs) {
  return {id, std::string(tok.token_bytes(id)), logprobs[static_cast<size_t>(id)]};
}

double seconds_between(Timing::Clock::time_point from, Timing::Clock::time_point to) {
  return to > from ? std::chrono::duration<double>(to - from).count() : 0.0;
}

}  // namespace

double Timing::prefill_seconds() const {
  return first_token == Clock::time_point{} ? 0.0 : seconds_between(admitted, first_token);
}

double Timing::decode_seconds() const {
  return seconds_between(first_token, last_token);
}

Result<SequenceRequest> Engine::prepare(Request request,
                                        const std::shared_ptr<EventStream>& stream) {
  // Tensor parallelism that lost a rank (over TCP): rank 0 is up but cannot run the model.
  if (std::string why = model_.unavailable(); !why.empty()) return Error{why, 503};
  const int64_t vocab = model_.model->shape().vocab;
  TERN_TRY(request.options.sampling.validate(vocab));
  if (request.prompt.empty()) return Error{"the prompt is empty"};
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= vocab) return make_error("prompt token {} is outside the vocabulary", id);
  }
  if (static_cast<int64_t>(request.prompt.size()) >= model_.context) {
    return make_error(
        "the prompt has {} tokens but the context holds {}; shorten it or raise --ctx",
        request.prompt.size(), model_.context);
  }
  if (request.options.max_tokens < 1) return Error{"max_tokens must be at least 1"};
  if (options_.max_output > 0)
    request.options.max_tokens = std::min(request.options.max_tokens, options_.max_output);
  auto state = std::make_shared<RequestState>(*model_.tokenizer, request.options.stop);
  state->stream = stream;
  state->options = request.options;
  state->top_logprobs = request.top_logprobs;
  state->usage.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  state->timing.submitted = Timing::Clock::now();
  const Tokenizer& tok = *model_.tokenizer;

  SequenceRequest seq;
  seq.prompt = std::move(request.prompt);
  seq.sampling = request.options.sampling;
  seq.max_tokens = request.options.max_tokens;
  seq.constraint = std::move(request.constraint);
  seq.needs_logits = request.top_logprobs >= 0;
  seq.hooks.cancelled = [stream] { return stream->cancelled(); };
  seq.hooks.on_token = [this, state, &tok](int32_t token, std::span<const float> logits) {
    state->timing.last_token = Timing::Clock::now();
    if (!state->sampled) {
      state->sampled = true;
      state->timing.first_token = state->timing.last_token;
    }
    const auto& o = state->options;
    const bool end = !o.ignore_eos && (tok.is_end_of_generation(token) ||
                                       std::find(o.stop_tokens.begin(), o.stop_tokens.end(),
                                                 token) != o.stop_tokens.end());
    if (end) return false;
    state->usage.completion_tokens++;
    {
      std::lock_guard m(metrics_mutex_);
      metrics_.generated_tokens++;
    }
    Event e;
    if (state->top_logprobs >= 0) {
      auto lp = Sampler::log_softmax(logits);
      TokenInfo info;
      info.chosen = logprob_of(tok, token, lp);
      std::vector<int32_t> order(lp.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
      const auto k = std::min<size_t>(static_cast<size_t>(state->top_logprobs), order.size());
      std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(),
                        [&](int32_t a, int32_t b) {
                          return lp[static_cast<size_t>(a)] > lp[static_cast<size_t>(b)];
                        });
      for (size_t i = 0; i < k; ++i) info.top.push_back(logprob_of(tok, order[i], lp));
      e.tokens.push_back(std::move(info));
    } else {
      e.tokens.push_back(TokenInfo{{token, {}, 0.0f}, {}});
    }
    auto out = state->stop.push(state->detok.push(token));
    e.text = std::move(out.text);
    state->stream->push(std::move(e));
    if (out.stopped) {
      state->stopped_by_string = true;
      state->stop_sequence = out.matched;
      return false;
    }
    return !state->stream->cancelled();
  };
  seq.hooks.on_admitted = [this, state](int64_t reused) {
    state->timing.admitted = Timing::Clock::now();
    state->usage.cached_tokens = reused;
    std::lock_guard m(metrics_mutex_);
    metrics_.cached_prompt_tokens += static_cast<uint64_t>(reused);
    metrics_.prompt_tokens += static_cast<uint64_t>(state->usage.prompt_tokens);
  };
  seq.hooks.on_finish = [this, state](SequenceEnd end, const Error* error) {
    if (error != nullptr) {
      Event e;
      e.type = Event::Type::Error;
      e.error = error->message;
      state->stream->push(std::move(e));
      return;
    }
    if (!state->stopped_by_string) {
      auto tail = state->stop.push(state->detok.finish());
      std::string text = tail.text + (tail.stopped ? std::string() : state->stop.flush());
      if (!text.empty()) {
        Event e;
        e.text = std::move(text);
        state->stream->push(std::move(e));
      }
    }
    Event done;
    done.type = Event::Type::Done;
    if (end == SequenceEnd::Cancelled || state->stream->cancelled()) {
      done.finish = FinishReason::Cancelled;
    } else if (end == SequenceEnd::ContextFull ||
               (!state->stopped_by_string &&
                state->usage.completion_tokens >= state->options.max_tokens)) {
      done.finish = FinishReason::Length;
    } else {
      done.finish = FinishReason::Stop;
    }
    done.stop_sequence = state->stop_sequence;
    done.usage = state->usage;
    done.timing = state->timing;
    if (finish_observer_) finish_observer_(done.usage, done.finish);
    state->stream->push(std::move(done));
  };
  return seq;
}

Result<void> Engine::enqueue(std::vector<SequenceRequest> requests) {
  {
    std::lock_guard lock(mutex_);
    const int64_t waiting = static_cast<int64_t>(incoming_.size()) + waiting_count_.load();
    if (waiting + static_cast<int64_t>(requests.size()) > options_.max_queue) {
      std::lock_guard m(metrics_mutex_);
      metrics_.rejected += requests.size();
      return Error{fmt::format("the server is busy: {} requests are already waiting", waiting),
                   kErrorOverloaded};
    }
    if (stopping_) return Error{"the server is shutting down", 503};
    for (auto& r : requests) incoming_.push_back(std::move(r));
  }
  {
    std::lock_guard m(metrics_mutex_);
    metrics_.requests += requests.size();
  }
  wake_.notify_all();
  return {};
}

Result<std::shared_ptr<EventStream>> Engine::submit(Request request) {
  std::vector<Request> one;
  one.push_back(std::move(request));
  auto streams = submit_all(std::move(one));
  if (!streams) return streams.error();
  return streams->front();
}

Result<std::vector<std::shared_ptr<EventStream>>> Engine::submit_all(
    std::vector<Request> requests) {
  std::vector<std::shared_ptr<EventStream>> streams;
  std::vector<SequenceRequest> seqs;
  for (auto& r : requests) {
    streams.push_back(std::make_shared<EventStream>());
    auto seq = prepare(std::move(r), streams.back());
    if (!seq) return seq.error();
    seqs.push_back(std::move(*seq));
  }
  TERN_TRY(enqueue(std::move(seqs)));
  return streams;
}

Result<GenerateResult> Engine::generate(Request request,
                                        const std::function<bool(const std::string&)>& on_text) {
  GenerateResult result;
  result.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  auto submitted = submit(std::move(request));
  if (!submitted) return submitted.error();
  const std::shared_ptr<EventStream>& stream = *submitted;
  while (auto e = stream->next()) {
    if (e->type == Event::Type::Error) return Error{e->error};
    if (e->type == Event::Type::Done) {
      result.finish = stream->cancelled() ? FinishReason::Cancelled : e->finish;
      result.reused_tokens = e->usage.cached_tokens;
      result.prefill_seconds = e->timing.prefill_seconds();
      result.decode_seconds = e->timing.decode_seconds();
      break;
    }
    if (stream->cancelled()) continue;  // what came after the cancel is not shown
    for (const auto& t : e->tokens) result.tokens.push_back(t.chosen.token);
    if (e->text.empty()) continue;
    result.text += e->text;
    if (on_text && !on_text(e->text)) stream->cancel();
  }
  return result;
}

Result<std::vector<float>> Engine::score(std::vector<int32_t> tokens, bool logprobs) {
  if (std::string why = model_.unavailable(); !why.empty()) return Error{why, 503};
  const int64_t vocab = model_.model->shape().vocab;
  if (tokens.empty()) return Error{"there are no tokens to score"};
  for (int32_t id : tokens) {
    if (id < 0 || id >= vocab) return make_error("token {} is outside the vocabulary", id);
  }
  if (static_cast<int64_t>(tokens.size()) > model_.context) {
    return make_error("{} tokens to score but the context holds {}; raise --ctx", tokens.size(),
                      model_.context);
  }
  struct Scored {
    std::vector<float> rows;
    std::optional<Error> error;
    std::promise<void> done;
  };
  auto scored = std::make_shared<Scored>();
  scored->rows.reserve(tokens.size() * static_cast<size_t>(vocab));
  const int64_t count = static_cast<int64_t>(tokens.size());
  SequenceRequest seq;
  seq.prompt = std::move(tokens);
  seq.max_tokens = 1;
  seq.score_prompt = true;
  seq.hooks.on_prompt_logits = [scored](std::span<const float> rows) {
    scored->rows.insert(scored->rows.end(), rows.begin(), rows.end());
  };
  seq.hooks.on_admitted = [this, count](int64_t) {
    std::lock_guard m(metrics_mutex_);
    metrics_.prompt_tokens += static_cast<uint64_t>(count);
  };
  seq.hooks.on_finish = [scored](SequenceEnd end, const Error* error) {
    if (error != nullptr) {
      scored->error = *error;
    } else if (end != SequenceEnd::Finished) {
      scored->error = Error{"the engine stopped before the tokens were scored"};
    }
    scored->done.set_value();
  };
  auto done = scored->done.get_future();
  std::vector<SequenceRequest> one;
  one.push_back(std::move(seq));
  TERN_TRY(enqueue(std::move(one)));
  done.wait();
  if (scored->error) return *scored->error;
  if (logprobs) {
    const auto v = static_cast<size_t>(vocab);
    for (size_t at = 0; at < scored->rows.size(); at += v) {
      auto lp = Sampler::log_softmax(std::span<const float>(scored->rows.data() + at, v));
      std::copy(lp.begin(), lp.end(), scored->rows.begin() + static_cast<long>(at));
    }
  }
  return std::move(scored->rows);
}

void Engine::update_gauges() {
  const double now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  waiting_count_.store(scheduler_.waiting());
  std::lock_guard m(metrics_mutex_);
  metrics_.running = scheduler_.running();
  metrics_.waiting = scheduler_.waiting();
  metrics_.kv_blocks_total = model_.cache->config().blocks;
  metrics_.kv_blocks_used = metrics_.kv_blocks_total - model_.cache->free_blocks();
  metrics_.cached_sequences = scheduler_.cached_sequences();
  recent_tokens_.emplace_back(now, metrics_.generated_tokens);
  while (recent_tokens_.size() > 2 && now - recent_tokens_.front().first > 10.0)
    recent_tokens_.pop_front();
  const double span = now - recent_tokens_.front().first;
  metrics_.generated_tokens_per_second =
      span > 0
          ? static_cast<double>(metrics_.generated_tokens - recent_tokens_.front().second) / span
          : 0.0;
}

EngineMetrics Engine::metrics() const {
  std::lock_guard lock(metrics_mutex_);
  EngineMetrics m = metrics_;
  std::lock_guard q(mutex_);
  m.waiting += static_cast<int64_t>(incoming_.size());
  return m;
}

void Engine::loop() {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !incoming_.empty() || !scheduler_.idle(); });
      if (stopping_) break;
      while (!incoming_.empty()) {
        scheduler_.add(std::move(incoming_.front()));
        incoming_.pop_front();
      }
    }
    scheduler_.step();
    update_gauges();
  }
  // Shutting down: every open stream gets its final event.
  std::deque<SequenceRequest> pending;
  {
    std::lock_guard lock(mutex_);
    pending.swap(incoming_);
  }
  for (auto& r : pending) scheduler_.add(std::move(r));
  scheduler_.cancel_all();
}

}  // namespace tern
