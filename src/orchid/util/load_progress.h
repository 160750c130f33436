// Progress of the slow steps of loading a model — quantizing at load, the GPU upload, the CPU
// backend's copy of the weights — as bytes done of a total, for the command line's progress bar.
// The steps report; one sink (the CLI's, on a terminal) shows them. Process-wide; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace orchid {

struct LoadProgress {
  std::string what;     // the step, e.g. "uploading weights to the GPU"
  uint64_t done = 0;    // bytes of weights the step has processed
  uint64_t total = 0;   // bytes it will process
  double seconds = 0;   // since the step began
  bool finished = false;
};

// Called at a step's start and end and at most every 100 ms between (from whichever thread
// reports); empty: nothing is shown (the library's default).
void set_load_progress_sink(std::function<void(const LoadProgress&)> sink);

// A step: begin, add bytes as they are processed, end. Steps do not nest.
void load_progress_begin(const std::string& what, uint64_t total);
void load_progress_add(uint64_t bytes);
void load_progress_end();

// A step for a scope: begins on construction, ends when it goes (errors included).
class LoadStep {
 public:
  LoadStep(const std::string& what, uint64_t total) { load_progress_begin(what, total); }
  ~LoadStep() { load_progress_end(); }
  LoadStep(const LoadStep&) = delete;
  LoadStep& operator=(const LoadStep&) = delete;
};

}  // namespace orchid
