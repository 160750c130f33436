// StreamingDetokenizer: appends each token's bytes to the held-back tail, emits everything up
// to the last character that may still be incomplete, and repairs the emitted part exactly as
// the final lossy decode would (ill-formed bytes before the tail can never become valid).
#include "orchid/tokenizer/tokenizer.h"
#include "orchid/tokenizer/unicode.h"

namespace orchid {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, bool skip_special)
    : tok_(&tok), skip_special_(skip_special) {}

Expected<std::string> StreamingDetokenizer::push(int32_t id) {
  auto bytes = tok_->token_bytes(id);
  if (!bytes)
    return err("decode: id ", id, " is not in the vocabulary (size ", tok_->vocab_size(), ")");
  if (skip_special_ && tok_->is_special(id)) return std::string();
  pending_.append(*bytes);
  size_t keep = unicode::incomplete_utf8_tail(pending_);
  std::string_view ready = std::string_view(pending_).substr(0, pending_.size() - keep);
  std::string out;
  if (unicode::is_valid_utf8(ready))
    out.assign(ready);
  else
    unicode::append_utf8_lossy(ready, out);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  unicode::append_utf8_lossy(pending_, out);
  pending_.clear();
  return out;
}

}  // namespace orchid
