#include "api/anthropic_blocks.h"

namespace tern::api {

// Until the model-family parser is wired in, everything is visible text.
struct OutputSplitter::Impl {
  bool thinking = false;
};

OutputSplitter::OutputSplitter(const LoadedModel&, bool thinking, const nlohmann::ordered_json&)
    : impl_(std::make_unique<Impl>()) {
  impl_->thinking = thinking;
}
OutputSplitter::~OutputSplitter() = default;
OutputSplitter::OutputSplitter(OutputSplitter&&) noexcept = default;
OutputSplitter& OutputSplitter::operator=(OutputSplitter&&) noexcept = default;

std::vector<OutputPiece> OutputSplitter::feed(const std::string& text) {
  std::vector<OutputPiece> out;
  if (!text.empty()) out.push_back({OutputPiece::Kind::Text, text});
  return out;
}

std::vector<OutputPiece> OutputSplitter::finish() {
  return {};
}

}  // namespace tern::api
