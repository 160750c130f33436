// StopMatcher: search the held tail plus the new piece; keep the longest suffix that is a
// proper prefix of a stop string. Work per push is O(|held + piece| · Σ|stop|), and held is
// shorter than the longest stop string.
#include "orchid/server/stop_strings.h"

#include <algorithm>

namespace orchid::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Result StopMatcher::push(std::string_view piece) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    return r;
  }
  held_.append(piece);
  // The earliest match of any stop string. The held part alone never holds a whole one.
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) first = at, matched_ = s;
  }
  if (first != std::string::npos) {
    r.text = held_.substr(0, first);
    r.stopped = stopped_ = true;
    held_.clear();
    return r;
  }
  // Hold the longest suffix that could still become a stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(s).substr(0, k)) {
        keep = k;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::flush() {
  std::string out = std::move(held_);
  held_.clear();
  return stopped_ ? std::string() : out;
}

}  // namespace orchid::server
