#include "api/anthropic_messages.h"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "api/anthropic_assembler.h"
#include "api/anthropic_blocks.h"
#include "api/chat_preparation.h"
#include "api/errors.h"
#include "api/openai_common.h"
#include "api/service.h"

namespace tern::api {

// Responses are built in insertion order ("type" first, as the API writes them).
using json = nlohmann::ordered_json;
using Body = nlohmann::json;

namespace {

constexpr auto kPingInterval = std::chrono::seconds(5);

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

HttpResponse bad_request(const std::string& message) {
  return error_response(ErrorFlavor::Anthropic, 400, message);
}

json stop_reason(const Event& done, bool used_tools) {
  if (done.finish == FinishReason::Length) return "max_tokens";
  if (!done.stop_sequence.empty()) return "stop_sequence";
  if (used_tools) return "tool_use";
  return "end_turn";
}

json usage_json(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", u.cached_tokens},
          {"output_tokens", u.completion_tokens}};
}

// A StreamWriter shared by the generating thread and a pinger: writes are serialized, and a
// `ping` event goes out whenever nothing else was written for a while (long prefills).
class PingingWriter {
 public:
  explicit PingingWriter(const StreamWriter& write)
      : write_(write), last_(std::chrono::steady_clock::now()), thread_([this] { run(); }) {}
  ~PingingWriter() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  PingingWriter(const PingingWriter&) = delete;
  PingingWriter& operator=(const PingingWriter&) = delete;

  bool write(const std::string& bytes) {
    std::lock_guard lock(mutex_);
    return write_locked(bytes);
  }

 private:
  bool write_locked(const std::string& bytes) {
    if (!alive_) return false;
    alive_ = write_(bytes);
    last_ = std::chrono::steady_clock::now();
    return alive_;
  }
  void run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      wake_.wait_until(lock, last_ + kPingInterval);
      if (stopping_ || !alive_) return;
      if (std::chrono::steady_clock::now() >= last_ + kPingInterval)
        write_locked(sse_event(R"({"type": "ping"})", "ping"));
    }
  }

  const StreamWriter& write_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool alive_ = true;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point last_;
  std::thread thread_;
};

Body parse_body(const HttpRequest& http) {
  Body body = Body::parse(http.body, nullptr, false);
  return body.is_discarded() ? Body() : body;
}

// What the message object of one reply repeats.
struct MessageHead {
  std::string id;
  std::string model;  // echoed back as the client sent it
  int64_t input_tokens = 0;
};

json message(const MessageHead& head, const json& content, const json& stop,
             const json& stop_sequence, const json& usage) {
  return json{{"id", head.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", head.model},
              {"content", content},
              {"stop_reason", stop},
              {"stop_sequence", stop_sequence},
              {"usage", usage}};
}

json stop_sequence(const Event& done) {
  return done.stop_sequence.empty() ? json(nullptr) : json(done.stop_sequence);
}

// The whole reply as one message object (a 500 when the engine failed).
HttpResponse whole_message(EventStream& events, OutputSplitter& splitter, const MessageHead& head) {
  AnthropicBlockAssembler blocks([](const char*, const json&) {});
  Event done;
  while (auto e = events.next()) {
    if (e->type == Event::Type::Text) {
      for (const auto& piece : splitter.feed(e->text)) blocks.add(piece);
    } else {
      done = *e;
    }
  }
  if (done.type == Event::Type::Error)
    return error_response(ErrorFlavor::Anthropic, 500, done.error);
  for (const auto& piece : splitter.finish()) blocks.add(piece);
  blocks.finish();
  HttpResponse r;
  r.body = dump(message(head, blocks.content(), stop_reason(done, blocks.used_tools()),
                        stop_sequence(done), usage_json(done.usage)));
  return r;
}

// The reply as message_start, content_block_* and message_delta / message_stop events while it is
// generated, with pings through long prefills. A client that goes away cancels the generation.
void stream_message(EventStream& events, OutputSplitter& splitter, const MessageHead& head,
                    const StreamWriter& raw) {
  PingingWriter out(raw);
  bool alive = true;
  auto emit = [&](const char* name, const json& data) {
    if (alive) alive = out.write(sse_event(dump(data), name));
    if (!alive) events.cancel();
  };
  json start_usage = {{"input_tokens", head.input_tokens},
                      {"cache_creation_input_tokens", 0},
                      {"cache_read_input_tokens", 0},
                      {"output_tokens", 0}};
  emit("message_start", {{"type", "message_start"},
                         {"message", message(head, json::array(), nullptr, nullptr, start_usage)}});
  emit("ping", {{"type", "ping"}});
  AnthropicBlockAssembler blocks(emit);
  while (auto e = events.next()) {
    if (e->type == Event::Type::Text) {
      for (const auto& piece : splitter.feed(e->text)) blocks.add(piece);
    } else if (e->type == Event::Type::Error) {
      blocks.finish();
      emit("error", json::parse(error_json(ErrorFlavor::Anthropic, 500, e->error)));
    } else {
      for (const auto& piece : splitter.finish()) blocks.add(piece);
      blocks.finish();
      json delta = {{"stop_reason", stop_reason(*e, blocks.used_tools())},
                    {"stop_sequence", stop_sequence(*e)}};
      emit("message_delta",
           {{"type", "message_delta"}, {"delta", delta}, {"usage", usage_json(e->usage)}});
      emit("message_stop", {{"type", "message_stop"}});
    }
  }
}

}  // namespace

HttpResponse anthropic_count_tokens(Service& service, const HttpRequest& http) {
  Body body = parse_body(http);
  if (!body.is_object()) return bad_request("the request body is not a JSON object");
  auto chat = anthropic_conversation(body);
  if (!chat) return bad_request(chat.error().message);
  auto prompt = render_chat_prompt(service.engine().model(), *chat);
  if (!prompt) return bad_request(prompt.error().message);
  HttpResponse r;
  r.body = dump(json{{"input_tokens", prompt->tokens.size()}});
  return r;
}

HttpResponse anthropic_messages(Service& service, const HttpRequest& http) {
  Body body = parse_body(http);
  if (!body.is_object()) return bad_request("the request body is not a JSON object");
  auto chat = anthropic_chat_request(body);
  if (!chat) return bad_request(chat.error().message);
  const LoadedModel& model = service.engine().model();
  auto prepared = prepare_chat(model, *chat, service.info().default_temperature);
  if (!prepared) return bad_request(prepared.error().message);
  const MessageHead head{random_id("msg_"),
                         body.contains("model") && body["model"].is_string()
                             ? body["model"].get<std::string>()
                             : service.info().model_name,
                         static_cast<int64_t>(prepared->request.prompt.size())};
  const bool stream = body.value("stream", false);
  auto splitter = std::make_shared<OutputSplitter>(std::move(prepared->parser));
  auto submitted = service.engine().submit(std::move(prepared->request));
  if (!submitted) {
    return error_response(ErrorFlavor::Anthropic, status_for(submitted.error()),
                          submitted.error().message);
  }
  auto events = *submitted;
  if (!stream) return whole_message(*events, *splitter, head);
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.stream = [=](const StreamWriter& write) { stream_message(*events, *splitter, head, write); };
  return r;
}

}  // namespace tern::api
