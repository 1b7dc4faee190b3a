#include "api/anthropic_messages.h"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "api/anthropic_assembler.h"
#include "api/anthropic_blocks.h"
#include "api/errors.h"
#include "api/openai_common.h"
#include "api/service.h"
#include "engine/chat_prompt.h"

namespace tern::api {

using nlohmann::ordered_json;
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

// Everything a request needs once its body has been read and checked.
struct Prepared {
  Request request;
  ordered_json tools;
  std::string template_source;  // with the rendered prompt: how to parse the output
  std::string rendered;
  std::string model;  // echoed back as the client sent it
  int64_t input_tokens = 0;
};

// Renders the prompt; shared by /messages and /messages/count_tokens.
Result<std::vector<int32_t>> render_prompt(Service& service, const Body& body, Prepared& p) {
  auto messages = anthropic_messages_to_template(body);
  if (!messages) return messages.error();
  auto tools = anthropic_tools_to_template(body);
  if (!tools) return tools.error();
  p.tools = std::move(*tools);
  ChatPromptOptions po;
  po.enable_thinking = false;  // the Messages API thinks only when asked
  if (body.contains("thinking") && !body["thinking"].is_null()) {
    const Body& t = body["thinking"];
    if (!t.is_object() || !t.contains("type") || !t["type"].is_string())
      return Error{"thinking: must be an object with a 'type' (enabled, disabled)"};
    const std::string type = t["type"].get<std::string>();
    if (type == "enabled" || type == "adaptive") {
      po.enable_thinking = true;
    } else if (type != "disabled") {
      return make_error("thinking.type: '{}' is not one of enabled, disabled", type);
    }
  }
  const LoadedModel& model = service.engine().model();
  auto formatter = ChatFormatter::create(model);
  if (!formatter) return formatter.error();
  auto rendered = formatter->render(*messages, p.tools, po);
  if (!rendered) return rendered.error();
  p.template_source = formatter->source();
  p.rendered = std::move(*rendered);
  return model.tokenizer->encode(p.rendered, false, true);
}

Result<Prepared> prepare(Service& service, const Body& body) {
  Prepared p;
  p.model = body.contains("model") && body["model"].is_string() ? body["model"].get<std::string>()
                                                                : service.info().model_name;
  if (!body.contains("max_tokens")) return Error{"max_tokens: field required"};
  if (!body["max_tokens"].is_number_integer() || body["max_tokens"].get<int64_t>() < 1)
    return Error{"max_tokens: must be a positive integer"};
  auto prompt = render_prompt(service, body, p);
  if (!prompt) return prompt.error();
  p.request.prompt = std::move(*prompt);
  p.input_tokens = static_cast<int64_t>(p.request.prompt.size());

  // Only the sampling fields the Messages API has; its stop list is `stop_sequences`.
  Body sampling = {{"max_tokens", body["max_tokens"]}};
  for (const char* key : {"temperature", "top_p", "top_k"}) {
    if (body.contains(key)) sampling[key] = body[key];
  }
  if (!sampling.contains("temperature") && service.info().default_temperature)
    sampling["temperature"] = *service.info().default_temperature;
  const int64_t context = service.engine().model().context;
  TERN_TRY(read_sampling(sampling, p.request, context));
  if (body.contains("stop_sequences") && !body["stop_sequences"].is_null()) {
    const Body& stops = body["stop_sequences"];
    if (!stops.is_array()) return Error{"stop_sequences: must be an array of strings"};
    for (const auto& s : stops) {
      if (!s.is_string()) return Error{"stop_sequences: must be an array of strings"};
      if (!s.get<std::string>().empty()) p.request.options.stop.push_back(s.get<std::string>());
    }
  }
  p.request.options.max_tokens =
      std::min<int64_t>(p.request.options.max_tokens, context - p.input_tokens);
  return p;
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

}  // namespace

HttpResponse anthropic_count_tokens(Service& service, const HttpRequest& http) {
  Body body = parse_body(http);
  if (!body.is_object()) return bad_request("the request body is not a JSON object");
  Prepared p;
  auto prompt = render_prompt(service, body, p);
  if (!prompt) return bad_request(prompt.error().message);
  HttpResponse r;
  r.body = dump(json{{"input_tokens", prompt->size()}});
  return r;
}

HttpResponse anthropic_messages(Service& service, const HttpRequest& http) {
  Body body = parse_body(http);
  if (!body.is_object()) return bad_request("the request body is not a JSON object");
  auto prepared = prepare(service, body);
  if (!prepared) return bad_request(prepared.error().message);
  Prepared p = std::move(*prepared);
  Engine& engine = service.engine();
  OutputSplitter splitter(p.template_source, p.rendered, p.tools);
  auto submitted = engine.submit(std::move(p.request));
  if (!submitted) {
    return error_response(ErrorFlavor::Anthropic, status_for(submitted.error()),
                          submitted.error().message);
  }
  auto events = *submitted;
  const std::string id = random_id("msg_");
  auto message = [id, model = p.model](const json& content, const json& stop,
                                       const json& stop_sequence, const json& usage) {
    return json{{"id", id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", model},
                {"content", content},
                {"stop_reason", stop},
                {"stop_sequence", stop_sequence},
                {"usage", usage}};
  };
  const bool stream = body.value("stream", false);

  if (!stream) {
    AnthropicBlockAssembler blocks([](const char*, const json&) {});
    Event done;
    while (auto e = events->next()) {
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
    r.body = dump(message(blocks.content(), stop_reason(done, blocks.used_tools()),
                          done.stop_sequence.empty() ? json(nullptr) : json(done.stop_sequence),
                          usage_json(done.usage)));
    return r;
  }

  HttpResponse r;
  r.content_type = "text/event-stream";
  auto shared_splitter = std::make_shared<OutputSplitter>(std::move(splitter));
  const int64_t input_tokens = p.input_tokens;
  r.stream = [=](const StreamWriter& raw) {
    PingingWriter out(raw);
    bool alive = true;
    auto emit = [&](const char* name, const json& data) {
      if (alive) alive = out.write(sse_event(dump(data), name));
      if (!alive) events->cancel();
    };
    json start_usage = {{"input_tokens", input_tokens},
                        {"cache_creation_input_tokens", 0},
                        {"cache_read_input_tokens", 0},
                        {"output_tokens", 0}};
    emit("message_start", {{"type", "message_start"},
                           {"message", message(json::array(), nullptr, nullptr, start_usage)}});
    emit("ping", {{"type", "ping"}});
    AnthropicBlockAssembler blocks(emit);
    while (auto e = events->next()) {
      if (e->type == Event::Type::Text) {
        for (const auto& piece : shared_splitter->feed(e->text)) blocks.add(piece);
      } else if (e->type == Event::Type::Error) {
        blocks.finish();
        emit("error", json::parse(error_json(ErrorFlavor::Anthropic, 500, e->error)));
      } else {
        for (const auto& piece : shared_splitter->finish()) blocks.add(piece);
        blocks.finish();
        json delta = {
            {"stop_reason", stop_reason(*e, blocks.used_tools())},
            {"stop_sequence", e->stop_sequence.empty() ? json(nullptr) : json(e->stop_sequence)}};
        emit("message_delta",
             {{"type", "message_delta"}, {"delta", delta}, {"usage", usage_json(e->usage)}});
        emit("message_stop", {{"type", "message_stop"}});
      }
    }
  };
  return r;
}

}  // namespace tern::api
