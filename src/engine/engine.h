// The public C++ API of libtern: submit(Request) returns an EventStream that yields text as it is
// generated and a final event with the finish reason, usage and timing. One loop thread runs the
// scheduler; requests from any thread join the running batch at the next step. The server drives
// it with several slots; the CLI (run, chat, bench) and the comparison tools with one, through
// generate() and score(): one generation loop for everything.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/loaded_model.h"
#include "engine/request.h"
#include "sched/scheduler.h"

namespace tern {

struct EngineOptions {
  int64_t parallel = 4;      // sequences decoded together
  int64_t step_tokens = 0;   // prefill chunk / token budget per step; 0: the model's prefill chunk
  int64_t max_queue = 64;    // requests waiting for a slot; more are refused (HTTP 429)
  bool prefix_cache = true;  // reuse the KV of earlier requests that share a prefix
  int64_t max_output = 0;    // cap on tokens generated per request (0: none); asking more is fine
};

inline constexpr int kErrorOverloaded = 429;  // Error::code of a refused submit

// Counters for /metrics; totals since start, gauges as of the last step.
struct EngineMetrics {
  uint64_t requests = 0;
  uint64_t rejected = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  int64_t cached_sequences = 0;
  double generated_tokens_per_second = 0;  // over the last ten seconds
};

struct Request {
  std::vector<int32_t> prompt;
  GenerateOptions options;
  int32_t top_logprobs = -1;  // -1: no logprobs; 0: the chosen token's; n: also the n best
  std::shared_ptr<TokenConstraint> constraint;  // constrained decoding (JSON, a tool call), or none
};

struct TokenLogprob {
  int32_t token = 0;
  std::string text;  // the token's bytes (may be a partial UTF-8 sequence)
  float logprob = 0;
};

struct TokenInfo {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

// Called on the loop thread as each request finishes (for a request log); keep it quick.
using FinishObserver = std::function<void(const Usage& usage, FinishReason finish)>;

struct Event {
  enum class Type { Text, Done, Error };
  Type type = Type::Text;
  std::string text;               // Text: newly completed text (may be empty)
  std::vector<TokenInfo> tokens;  // Text: the token(s) behind it, with logprobs when asked
  FinishReason finish = FinishReason::Stop;  // Done
  std::string stop_sequence;                 // Done: the stop string that ended it, if any
  Usage usage;                               // Done
  Timing timing;                             // Done
  std::string error;                         // Error
};

class EventStream {
 public:
  // Blocks for the next event; nullopt once the final event has been taken.
  std::optional<Event> next();
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  void push(Event event);

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> events_;
  bool closed_ = false;
  bool final_taken_ = false;
  std::atomic<bool> cancelled_{false};
};

class Engine {
 public:
  Engine(LoadedModel& model, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  LoadedModel& model() { return model_; }
  // Validates and queues the request; errors (bad sampling values, prompt too long) come back at
  // once instead of as a stream.
  Result<std::shared_ptr<EventStream>> submit(Request request);
  // Several requests that join the same step (a benchmark's batch): all are queued, or none.
  Result<std::vector<std::shared_ptr<EventStream>>> submit_all(std::vector<Request> requests);
  // One request, waited for. Text goes to `on_text` as it comes; returning false cancels the
  // request (EventStream::cancel): the result then ends with FinishReason::Cancelled and holds
  // the text written so far.
  Result<GenerateResult> generate(Request request,
                                  const std::function<bool(const std::string&)>& on_text = {});
  // Scoring (teacher forcing, as vLLM's prompt_logprobs): the next-token logits after each of
  // `tokens`, one row of the vocabulary a token ([tokens x vocab]; log-probabilities with
  // `logprobs`). It runs through the scheduler like any request, in its prefill chunks, and never
  // starts from a cached prefix.
  Result<std::vector<float>> score(std::vector<int32_t> tokens, bool logprobs = false);
  // Ends every stream (final events with FinishReason::Cancelled) and stops the loop.
  void shutdown();
  EngineMetrics metrics() const;
  // Set before requests are submitted.
  void set_finish_observer(FinishObserver observer) { finish_observer_ = std::move(observer); }

 private:
  void loop();
  void update_gauges();
  // Checks a request and builds its scheduler request, whose hooks feed `stream`.
  Result<SequenceRequest> prepare(Request request, const std::shared_ptr<EventStream>& stream);
  // Queues requests for the loop thread, or refuses them all (busy, shutting down).
  Result<void> enqueue(std::vector<SequenceRequest> requests);
  LoadedModel& model_;
  EngineOptions options_;
  Scheduler scheduler_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<SequenceRequest> incoming_;
  bool stopping_ = false;
  // Metrics: counters touched from request hooks (loop thread) and submit (any thread).
  mutable std::mutex metrics_mutex_;
  std::atomic<int64_t> waiting_count_{0};
  EngineMetrics metrics_;
  std::deque<std::pair<double, uint64_t>> recent_tokens_;  // (seconds, generated so far)
  FinishObserver finish_observer_;
  std::thread thread_;
};

}  // namespace tern
