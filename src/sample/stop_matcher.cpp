#include "sample/stop_matcher.h"

#include <algorithm>

namespace tern {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Output StopMatcher::push(const std::string& piece) {
  Output out;
  if (stopped_) {
    out.stopped = true;
    return out;
  }
  pending_ += piece;
  // The earliest complete stop string wins.
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    size_t at = pending_.find(s);
    if (at != std::string::npos && at < best) {
      best = at;
      out.matched = s;
    }
  }
  if (best != std::string::npos) {
    out.text = pending_.substr(0, best);
    out.stopped = true;
    stopped_ = true;
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  out.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string rest;
  if (!stopped_) rest.swap(pending_);
  return rest;
}

}  // namespace tern
