// Stop strings on a stream of text: finds the earliest occurrence of any stop string across
// arbitrary cuts, and holds back a tail that may still grow into one, so nothing after a stop
// string is ever released. Runs on the raw detokenized text, before the output parser.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace orchid::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;      // final text: no stop string can start in it
    bool stopped = false;  // a stop string matched: text ends right before it
  };
  // Feeds the next piece. After a match everything is ignored (stopped() stays true).
  Result push(std::string_view piece);
  // End of the stream: the held-back tail (no stop string matched in it).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched ("" before a match).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // a tail that is a proper prefix of some stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace orchid::server
