#include "orchid/backend/backend.h"

namespace orchid {

Status check_forward_input(std::span<const int32_t> tokens, int64_t n_vocab, int64_t n_past,
                           int64_t capacity) {
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return err("forward: no tokens");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      return err("token id ", tokens[i], " at index ", i, " is outside the vocabulary [0, ",
                 n_vocab, ")");
  if (n_past + n > capacity)
    return err("context overflow: ", n_past, " + ", n, " tokens exceed the state's ", capacity);
  return {};
}

Error forward_cancelled(int64_t done, int64_t total) {
  return cancellation("forward cancelled after ", done, " of ", total, " tokens");
}

}  // namespace orchid
