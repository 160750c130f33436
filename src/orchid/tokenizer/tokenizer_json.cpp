// SAX handler for tokenizer.json. The model's vocab (token → id object) and merges (array of
// [a, b] pairs or legacy "a b" strings) are appended to BpeSpec arenas as they stream past;
// any other value is rebuilt as a nlohmann::json tree (they are all small).
#include "orchid/tokenizer/tokenizer_json.h"

#include <string>
#include <vector>

namespace orchid {
namespace {

using json = nlohmann::json;

// Rebuilds one JSON value from SAX events.
class Capture {
 public:
  void begin() {
    root_ = json();
    stack_.clear();
  }
  // A scalar; true when it completes the captured value.
  bool scalar(json v) {
    *slot() = std::move(v);
    return stack_.empty();
  }
  void start(bool object) {
    json* s = slot();
    *s = object ? json::object() : json::array();
    stack_.push_back(s);
  }
  // Closes the innermost container; true when that completes the captured value.
  bool end() {
    stack_.pop_back();
    return stack_.empty();
  }
  void key(std::string k) { key_ = std::move(k); }
  json take() { return std::move(root_); }

 private:
  // Where the next value goes. Pointers on the stack stay valid: only the innermost container
  // grows, and the open containers are its ancestors.
  json* slot() {
    if (stack_.empty()) return &root_;
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(nullptr);
      return &top->back();
    }
    return &(*top)[key_];
  }
  json root_;
  std::vector<json*> stack_;
  std::string key_;
};

class Handler {
 public:
  explicit Handler(TokenizerJson& out) : out_(out) { out_.sections = json::object(); }

  std::string error;

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(json::number_integer_t v) { return integer(v, true); }
  bool number_unsigned(json::number_unsigned_t v) { return integer(int64_t(v), v <= INT64_MAX); }
  bool number_float(json::number_float_t v, const std::string&) { return value(v, true); }
  bool binary(json::binary_t&) { return fail("unexpected binary value"); }

  bool string(std::string& s) {
    switch (mode_) {
      case Mode::merges:  // legacy "a b"
      {
        size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          return fail("model.merges[", out_.bpe.merges.size(), "]: expected \"a b\", got \"", s,
                      "\"");
        add_merge(std::string_view(s).substr(0, space), std::string_view(s).substr(space + 1));
        return true;
      }
      case Mode::merge_pair:
        if (pair_count_ == 2) return fail_pair();
        pair_[pair_count_++].assign(s);  // copy: moving would take the lexer's buffer
        return true;
      default:
        return value(std::move(s));
    }
  }

  bool key(std::string& k) {
    switch (mode_) {
      case Mode::root:
        root_key_ = std::move(k);
        return true;
      case Mode::model:
        model_key_ = std::move(k);
        return true;
      case Mode::vocab:
        vocab_key_.assign(k);  // copy: moving would take the lexer's buffer
        return true;
      case Mode::capture:
        capture_.key(std::move(k));
        return true;
      default:
        return fail("unexpected key \"", k, "\"");
    }
  }

  bool start_object(std::size_t) {
    switch (mode_) {
      case Mode::start:
        mode_ = Mode::root;
        return true;
      case Mode::root:
        if (root_key_ == "model") {
          out_.has_model = true;
          mode_ = Mode::model;
          return true;
        }
        break;
      case Mode::model:
        if (model_key_ == "vocab") {
          out_.has_vocab = true;
          mode_ = Mode::vocab;
          return true;
        }
        if (model_key_ == "merges") return fail("model.merges: expected an array, got an object");
        break;
      case Mode::vocab:
        return fail("model.vocab[\"", vocab_key_, "\"]: expected an integer id, got an object");
      case Mode::merges:
      case Mode::merge_pair:
        return fail_pair();
      case Mode::capture:
        capture_.start(true);
        return true;
      case Mode::done:
        return fail("unexpected data after the top-level object");
    }
    begin_capture();
    capture_.start(true);
    return true;
  }

  bool end_object() {
    switch (mode_) {
      case Mode::root:
        mode_ = Mode::done;
        return true;
      case Mode::model:
        mode_ = Mode::root;
        return true;
      case Mode::vocab:
        mode_ = Mode::model;
        return true;
      case Mode::capture:
        if (capture_.end()) finish_capture();
        return true;
      default:
        return fail("unexpected end of object");
    }
  }

  bool start_array(std::size_t) {
    switch (mode_) {
      case Mode::start:
        return fail("expected a JSON object at the top level, got an array");
      case Mode::model:
        if (model_key_ == "merges") {
          out_.has_merges = true;
          mode_ = Mode::merges;
          return true;
        }
        if (model_key_ == "vocab")
          return fail("model.vocab: expected an object of token → id, got an array");
        break;
      case Mode::vocab:
        return fail("model.vocab[\"", vocab_key_, "\"]: expected an integer id, got an array");
      case Mode::merges:
        mode_ = Mode::merge_pair;
        pair_count_ = 0;
        return true;
      case Mode::merge_pair:
        return fail_pair();
      case Mode::capture:
        capture_.start(false);
        return true;
      default:
        break;
    }
    begin_capture();
    capture_.start(false);
    return true;
  }

  bool end_array() {
    switch (mode_) {
      case Mode::merges:
        mode_ = Mode::model;
        return true;
      case Mode::merge_pair:
        if (pair_count_ != 2) return fail_pair();
        add_merge(pair_[0], pair_[1]);
        mode_ = Mode::merges;
        return true;
      case Mode::capture:
        if (capture_.end()) finish_capture();
        return true;
      default:
        return fail("unexpected end of array");
    }
  }

  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& e) {
    if (error.empty()) {
      std::string what = e.what();
      // nlohmann's message starts with "[json.exception.parse_error.101] parse error at ...".
      if (size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
      error = "invalid JSON at byte " + std::to_string(position) + " (near '" +
              last_token.substr(0, 40) + "'): " + what;
    }
    return false;
  }

 private:
  enum class Mode { start, root, model, vocab, merges, merge_pair, capture, done };

  template <class... Parts>
  bool fail(const Parts&... parts) {
    if (error.empty()) error = err(parts...).message;
    return false;
  }
  bool fail_pair() {
    return fail("model.merges[", out_.bpe.merges.size(),
                "]: expected a pair of strings [\"a\", \"b\"]");
  }

  bool integer(int64_t v, bool fits) {
    if (mode_ == Mode::vocab) {
      if (!fits) return fail("model.vocab[\"", vocab_key_, "\"]: id out of range");
      out_.bpe.vocab.push_back(
          {uint32_t(out_.bpe.vocab_text.size()), uint32_t(vocab_key_.size()), v});
      out_.bpe.vocab_text += vocab_key_;
      return true;
    }
    return value(v, true);
  }

  bool value(json v, bool /*number*/ = false) {
    switch (mode_) {
      case Mode::vocab:
        return fail("model.vocab[\"", vocab_key_, "\"]: expected an integer id, got ",
                    v.type_name());
      case Mode::merges:
      case Mode::merge_pair:
        return fail_pair();
      case Mode::capture:
        if (capture_.scalar(std::move(v))) finish_capture();
        return true;
      case Mode::root:
      case Mode::model:
        begin_capture();
        capture_.scalar(std::move(v));
        finish_capture();
        return true;
      default:
        return fail("expected a JSON object at the top level");
    }
  }

  void add_merge(std::string_view a, std::string_view b) {
    std::string& t = out_.bpe.merges_text;
    BpeSpec::MergeEntry e{uint32_t(t.size()), uint32_t(a.size()), uint32_t(t.size() + a.size()),
                          uint32_t(b.size())};
    t.append(a);
    t.append(b);
    out_.bpe.merges.push_back(e);
  }

  void begin_capture() {
    capture_owner_ = mode_;
    mode_ = Mode::capture;
    capture_.begin();
  }
  void finish_capture() {
    mode_ = capture_owner_;
    if (mode_ == Mode::model) {
      if (model_key_ == "vocab" || model_key_ == "merges") {
        // A vocab/merges that is neither object nor array: reported by the caller as missing.
        out_.model[model_key_ == "vocab" ? "vocab_invalid" : "merges_invalid"] = capture_.take();
        return;
      }
      out_.model[model_key_] = capture_.take();
    } else {
      if (root_key_ == "model") {
        out_.sections["model_invalid"] = capture_.take();
        return;
      }
      out_.sections[root_key_] = capture_.take();
    }
  }

  TokenizerJson& out_;
  Mode mode_ = Mode::start;
  Mode capture_owner_ = Mode::root;
  Capture capture_;
  std::string root_key_, model_key_, vocab_key_;
  std::string pair_[2];
  int pair_count_ = 0;
};

}  // namespace

Expected<TokenizerJson> parse_tokenizer_json(std::string_view text) {
  // JSON text never holds a raw NUL; nlohmann would stop reading there and accept the prefix
  // (a file padded with zeros, say).
  if (size_t nul = text.find('\0'); nul != std::string_view::npos)
    return err("invalid JSON: NUL byte at offset ", nul, " (corrupted file?)");
  TokenizerJson out;
  out.model = json::object();
  // Vocabulary and merges are most of the file; reserving avoids regrowing the arenas.
  out.bpe.vocab_text.reserve(text.size() / 6);
  out.bpe.merges_text.reserve(text.size() / 6);
  out.bpe.vocab.reserve(text.size() / 64);
  out.bpe.merges.reserve(text.size() / 64);
  Handler h(out);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &h);
  } catch (const std::exception& e) {  // allocation failure or a library error: report, never throw
    return err("cannot parse: ", e.what());
  }
  if (!ok) return err(h.error.empty() ? std::string("invalid JSON") : h.error);
  return out;
}

}  // namespace orchid
