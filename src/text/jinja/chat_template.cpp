#include "text/jinja/chat_template.h"

#include <new>

#include "text/jinja/internal.h"

namespace tern::jinja {

struct ChatTemplate::Program {
  Body body;
};

namespace {

template <typename Json>
Value from_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case Json::value_t::number_unsigned:
      return Value::integer(static_cast<int64_t>(j.template get<uint64_t>()));
    case Json::value_t::number_float:
      return Value::floating(j.template get<double>());
    case Json::value_t::string:
      return Value::string(j.template get<std::string>());
    case Json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.as_dict().items.emplace_back(Value::string(it.key()), from_json(it.value()));
      }
      return d;
    }
    default:
      return Value::none();
  }
}

template <typename Json>
Result<std::string> render_impl(const ChatTemplate::Program& program, const Json& context,
                                const RenderOptions& options) {
  if (!context.is_object()) return make_error("chat template context must be a JSON object");
  try {
    Interpreter interpreter(RenderSettings{options.now, options.max_steps});
    return interpreter.render(program.body, from_json(context));
  } catch (const TemplateError& e) {
    return make_error("chat template: {}", e.what());
  } catch (const std::bad_alloc&) {
    // The limits (internal.h) keep a template's own values small; this is the machine's memory
    // running out beside them, which fails this render, not the server.
    return make_error("chat template: out of memory while rendering");
  }
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  try {
    auto program = std::make_shared<Program>();
    program->body = tern::jinja::parse(tokenize(source));
    return ChatTemplate(std::move(program));
  } catch (const TemplateError& e) {
    return make_error("chat template: {}", e.what());
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                         const RenderOptions& options) const {
  return render_impl(*program_, context, options);
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context,
                                         const RenderOptions& options) const {
  return render_impl(*program_, context, options);
}

}  // namespace tern::jinja
