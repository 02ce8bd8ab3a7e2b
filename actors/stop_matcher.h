// Stop strings on a stream of text deltas: text that could still be the beginning of a stop
// string is withheld until it is ruled out, and the stop string itself (and anything after
// it) is never released.
//
// Input deltas are whole UTF-8 characters (the incremental detokenizer's output); stop
// strings are valid UTF-8, so a withheld suffix always starts on a character boundary and
// every released piece is valid UTF-8.
#pragma once

#include <string>
#include <vector>

namespace strata::actors {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends `delta`; returns the text that is now safe to release. After a match, stopped()
  // is true and later calls return "".
  std::string push(const std::string& delta);
  // The stream ends without a match: the withheld text is released.
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string that matched

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace strata::actors
