#include "api/service.h"

#include <fmt/format.h>

#include <cctype>

#include <nlohmann/json.hpp>

#include "api/chat_preparation.h"
#include "api/errors.h"
#include "api/openai_common.h"

namespace tern::api {

using nlohmann::json;

namespace {
bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}
}  // namespace

bool Service::serves_model(std::string_view name) const {
  if (name.empty() || same_name(name, info_.model_name)) return true;
  for (const auto& alias : info_.aliases) {
    if (same_name(name, alias)) return true;
  }
  return false;
}

std::optional<HttpResponse> Service::reject_model(const json& body) const {
  if (!body.contains("model") || body["model"].is_null()) return std::nullopt;
  if (!body["model"].is_string()) {
    return error_response(ErrorFlavor::OpenAI, 400, "'model' must be a string", "model");
  }
  const std::string name = body["model"].get<std::string>();
  if (serves_model(name)) return std::nullopt;
  return error_response(
      ErrorFlavor::OpenAI, 404,
      fmt::format("the model '{}' does not exist; this server serves '{}'", name, info_.model_name),
      "model");
}

HttpResponse Service::health(const HttpRequest&) {
  HttpResponse r;
  // A tensor-parallel group that lost a rank: up, but every request fails (503) until restarted.
  if (std::string why = engine_.model().unavailable(); !why.empty()) {
    r.status = 503;
    r.body = json{{"status", "error"}, {"model", info_.model_name}, {"error", why}}.dump();
    return r;
  }
  r.body = json{{"status", "ok"}, {"model", info_.model_name}}.dump();
  return r;
}

// Prometheus text exposition format.
HttpResponse Service::metrics(const HttpRequest&) {
  const EngineMetrics m = engine_.metrics();
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  metric("tern_requests_total", "counter", "Requests accepted.", static_cast<double>(m.requests));
  metric("tern_requests_rejected_total", "counter", "Requests refused because the queue was full.",
         static_cast<double>(m.rejected));
  metric("tern_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
         static_cast<double>(m.prompt_tokens));
  metric("tern_prompt_tokens_cached_total", "counter",
         "Prompt tokens served from the prefix cache.",
         static_cast<double>(m.cached_prompt_tokens));
  metric("tern_generated_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(m.generated_tokens));
  metric("tern_generated_tokens_per_second", "gauge",
         "Generated tokens per second over the last ten seconds.", m.generated_tokens_per_second);
  metric("tern_requests_running", "gauge", "Requests being decoded.",
         static_cast<double>(m.running));
  metric("tern_queue_depth", "gauge", "Requests waiting for a slot.",
         static_cast<double>(m.waiting));
  metric("tern_kv_blocks_used", "gauge", "KV cache blocks in use (running and cached sequences).",
         static_cast<double>(m.kv_blocks_used));
  metric("tern_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
         static_cast<double>(m.kv_blocks_total));
  metric("tern_prefix_cache_sequences", "gauge", "Finished sequences kept for prefix reuse.",
         static_cast<double>(m.cached_sequences));
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = std::move(out);
  return r;
}

HttpResponse Service::models(const HttpRequest&) {
  const LoadedModel& m = engine_.model();
  json entry = {{"id", info_.model_name},
                {"object", "model"},
                {"created", info_.created},
                {"owned_by", "tern"},
                {"context_length", m.context},
                {"architecture", m.info.architecture},
                {"quantization", m.info.quantization}};
  HttpResponse r;
  r.body = json{{"object", "list"}, {"data", json::array({entry})}}.dump();
  return r;
}

// POST /v1/completions: a raw prompt (string or token ids), no chat template.
HttpResponse Service::completions(const HttpRequest& http) {
  json body = json::parse(http.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return error_response(ErrorFlavor::OpenAI, 400, "the request body is not a JSON object");
  }
  if (auto rejected = reject_model(body)) return *rejected;
  Request request;
  if (!body.contains("prompt"))
    return error_response(ErrorFlavor::OpenAI, 400, "'prompt' is required", "prompt");
  const json& prompt = body["prompt"];
  const Tokenizer& tok = *engine_.model().tokenizer;
  if (prompt.is_string()) {
    request.prompt = tok.encode(prompt.get<std::string>(), true, true);
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    for (const auto& id : prompt) {
      if (!id.is_number_integer())
        return error_response(ErrorFlavor::OpenAI, 400, "'prompt' token ids must be integers",
                              "prompt");
      request.prompt.push_back(id.get<int32_t>());
    }
  } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
    request.prompt = tok.encode(prompt[0].get<std::string>(), true, true);
  } else {
    return error_response(ErrorFlavor::OpenAI, 400,
                          "'prompt' must be a string, one string in an array, or token ids",
                          "prompt");
  }
  auto sampling = read_sampling(body, engine_.model().context);
  if (!sampling) return error_response(ErrorFlavor::OpenAI, 400, sampling.error().message);
  // Unset: OpenAI's temperature 1 and 256 tokens (--temp is for chat requests).
  request.options = generate_options(*sampling, 1.0f, 256);
  if (body.contains("logprobs") && body["logprobs"].is_number_integer()) {
    request.top_logprobs = body["logprobs"].get<int32_t>();
  }
  const bool stream = body.value("stream", false);
  const bool include_usage = body.contains("stream_options") &&
                             body["stream_options"].is_object() &&
                             body["stream_options"].value("include_usage", false);
  const bool echo = body.value("echo", false);
  std::string echo_text = echo && prompt.is_string() ? prompt.get<std::string>() : "";
  auto submitted = engine_.submit(std::move(request));
  if (!submitted) {
    return error_response(ErrorFlavor::OpenAI, status_for(submitted.error()),
                          submitted.error().message);
  }
  auto events = *submitted;
  const std::string id = random_id("cmpl-");
  const int64_t created = unix_time();
  const std::string model = info_.model_name;
  auto chunk = [=](const std::string& text, const json& finish) {
    return json{
        {"id", id},
        {"object", "text_completion"},
        {"created", created},
        {"model", model},
        {"choices",
         json::array(
             {{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}}})}};
  };
  // llama.cpp's extension: the generated token ids, for exact comparisons between engines.
  const bool return_tokens = body.value("return_tokens", false);
  if (!stream) {
    std::string text = echo_text;
    std::vector<int32_t> ids;
    Event done;
    while (auto e = events->next()) {
      if (e->type == Event::Type::Text) {
        text += e->text;
        for (const auto& t : e->tokens) ids.push_back(t.chosen.token);
      } else {
        done = *e;
      }
    }
    if (done.type == Event::Type::Error)
      return error_response(ErrorFlavor::OpenAI, 500, done.error);
    json out = chunk(text, openai_finish_reason(done.finish));
    if (return_tokens) out["choices"][0]["tokens"] = ids;
    out["usage"] = openai_usage(done.usage);
    HttpResponse r;
    r.body = out.dump(-1, ' ', false, json::error_handler_t::replace);
    return r;
  }
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.stream = [=](const StreamWriter& write) {
    if (!echo_text.empty()) write(sse_event(chunk(echo_text, nullptr).dump()));
    while (auto e = events->next()) {
      if (e->type == Event::Type::Text) {
        if (e->text.empty()) continue;
        if (!write(sse_event(
                chunk(e->text, nullptr).dump(-1, ' ', false, json::error_handler_t::replace)))) {
          events->cancel();
        }
      } else if (e->type == Event::Type::Error) {
        write(sse_event(error_json(ErrorFlavor::OpenAI, 500, e->error)));
      } else {
        write(sse_event(chunk("", openai_finish_reason(e->finish)).dump()));
        if (include_usage) {
          json u = chunk("", nullptr);
          u["choices"] = json::array();
          u["usage"] = openai_usage(e->usage);
          write(sse_event(u.dump()));
        }
      }
    }
    write(sse_event("[DONE]"));
  };
  return r;
}

}  // namespace tern::api
