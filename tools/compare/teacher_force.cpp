// tern-teacher-force: Tern's next-token distribution at every position of a fixed token
// sequence (teacher forcing), for comparing with another engine's greedy choices.
//   tern-teacher-force MODEL.gguf IDS.json > top2.json
// IDS.json is a JSON array of token ids; the output has, per position i (the prediction of
// token i + 1), [[id, logprob], [id, logprob]] for the two most likely tokens. The engine scores
// the sequence (Engine::score) as it serves any request.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/loaded_model.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    fmt::print(stderr, "usage: {} MODEL.gguf IDS.json\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[2]);
  auto ids_json = nlohmann::json::parse(in, nullptr, false);
  if (ids_json.is_discarded() || !ids_json.is_array()) {
    fmt::print(stderr, "error: {} is not a JSON array of token ids\n", argv[2]);
    return 1;
  }
  std::vector<int32_t> ids = ids_json.get<std::vector<int32_t>>();
  tern::LoadOptions o;
  o.context = static_cast<int64_t>(ids.size()) + 16;
  o.progress = false;
  auto model = tern::load_model_file(argv[1], o);
  if (!model) {
    fmt::print(stderr, "error: {}\n", model.error().message);
    return 1;
  }
  tern::Engine engine(**model, tern::EngineOptions{.parallel = 1, .prefix_cache = false});
  const size_t vocab = static_cast<size_t>((*model)->model->shape().vocab);
  auto logprobs = engine.score(ids, true);
  if (!logprobs) {
    fmt::print(stderr, "error: {}\n", logprobs.error().message);
    return 1;
  }
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::span<const float> lp(logprobs->data() + i * vocab, vocab);
    std::vector<int32_t> order(vocab);
    for (size_t v = 0; v < vocab; ++v) order[v] = static_cast<int32_t>(v);
    std::partial_sort(order.begin(), order.begin() + 2, order.end(), [&](int32_t a, int32_t b) {
      return lp[static_cast<size_t>(a)] > lp[static_cast<size_t>(b)] ||
             (lp[static_cast<size_t>(a)] == lp[static_cast<size_t>(b)] && a < b);
    });
    out.push_back({{order[0], lp[static_cast<size_t>(order[0])]},
                   {order[1], lp[static_cast<size_t>(order[1])]}});
  }
  fmt::print("{}\n", out.dump());
  return 0;
}
