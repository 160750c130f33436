// ScriptedBackend: a state is its token history plus the script position (rule in the header).
#include "orchid/backend/scripted/scripted_backend.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "orchid/tokenizer/tokenizer.h"

namespace orchid {
namespace {

struct ScriptPosition {
  int64_t reply = -1;      // which reply this request gets; -1 before any request
  int64_t rule = -1;       // the rule whose reply it gets instead; -1: none matched
  size_t fed = 0;          // m: reply tokens fed back so far
  int32_t predicted = -1;  // the token the last forward scripted; -1 after a restore
};

class ScriptedState final : public BackendState {
 public:
  explicit ScriptedState(int64_t capacity) : capacity_(capacity) {}
  int64_t n_past() const override { return int64_t(history.size()); }
  int64_t capacity() const override { return capacity_; }

  std::vector<int32_t> history;
  ScriptPosition pos;

 private:
  int64_t capacity_;
};

class ScriptedSnapshot final : public StateSnapshot {
 public:
  explicit ScriptedSnapshot(std::vector<int32_t> h) : history(std::move(h)) {}
  int64_t n_past() const override { return int64_t(history.size()); }
  int64_t bytes() const override {
    return int64_t(sizeof(*this) + history.capacity() * sizeof(int32_t));
  }
  std::vector<int32_t> history;
};

class ScriptedBackend final : public Backend {
 public:
  ScriptedBackend(int64_t n_vocab, std::vector<std::vector<int32_t>> replies, int32_t eos,
                  double prefill_ms_per_token, std::vector<ScriptedRule> rules)
      : n_vocab_(n_vocab),
        replies_(std::move(replies)),
        rules_(std::move(rules)),
        eos_(eos),
        prefill_ms_per_token_(prefill_ms_per_token) {}

  std::string name() const override { return "scripted"; }
  int64_t n_vocab() const override { return n_vocab_; }

  Expected<std::unique_ptr<BackendState>> new_state(int64_t max_tokens) override {
    if (max_tokens <= 0) return err("scripted backend: state capacity must be positive");
    return std::unique_ptr<BackendState>(std::make_unique<ScriptedState>(max_tokens));
  }

  Status forward(BackendState& state, std::span<const int32_t> tokens, LogitsMode mode,
                 std::vector<float>& logits, int64_t, const CancelCheck& cancel) override {
    auto& st = static_cast<ScriptedState&>(state);
    if (tokens.empty()) return err("scripted backend: forward of no tokens");
    if (st.n_past() + int64_t(tokens.size()) > st.capacity())
      return err("context overflow: ", st.n_past(), " + ", int64_t(tokens.size()),
                 " tokens exceed the state's ", st.capacity());
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || tokens[i] >= n_vocab_)
        return err("token id ", tokens[i], " at position ", int64_t(i),
                   " is outside the vocabulary");
    ScriptPosition& p = st.pos;
    // A decode step feeds back the scripted token; anything else is prompt tokens.
    const bool decode_step = tokens.size() == 1 && p.predicted >= 0 && tokens[0] == p.predicted;
    ORCHID_TRY(consume(st, tokens, decode_step ? 0.0 : prefill_ms_per_token_, cancel));
    p.fed = decode_step ? p.fed + 1 : 0;  // prompt tokens: the reply starts after them
    if (!decode_step) p.rule = matching_rule(st.history);

    const std::vector<int32_t>* reply =
        p.rule >= 0    ? &rules_[size_t(p.rule)].reply
        : p.reply >= 0 ? &replies_[size_t(p.reply) % replies_.size()]
                       : nullptr;
    p.predicted = reply && p.fed < reply->size() ? (*reply)[p.fed] : eos_;
    const size_t rows = mode == LogitsMode::all ? tokens.size() : 1;
    logits.assign(rows * size_t(n_vocab_), 0.f);
    // All rows but the last: the next prompt token (teacher forcing), for evaluation callers.
    for (size_t r = 0; r + 1 < rows; ++r)
      logits[r * size_t(n_vocab_) + size_t(tokens[r + 1])] = kScriptLogit;
    logits[(rows - 1) * size_t(n_vocab_) + size_t(p.predicted)] = kScriptLogit;
    return {};
  }

  std::unique_ptr<StateSnapshot> snapshot(const BackendState& state) override {
    return std::make_unique<ScriptedSnapshot>(static_cast<const ScriptedState&>(state).history);
  }

  Status restore(BackendState& state, const StateSnapshot& snap) override {
    auto& st = static_cast<ScriptedState&>(state);
    const auto& s = static_cast<const ScriptedSnapshot&>(snap);
    if (s.n_past() > st.capacity()) return err("snapshot longer than the state");
    st.history = s.history;
    st.pos = ScriptPosition{requests_begun_++, -1, 0, -1};  // a request begins (header: the rule)
    return {};
  }

 private:
  // The first rule whose pattern the history holds, or -1.
  int64_t matching_rule(const std::vector<int32_t>& history) const {
    for (size_t k = 0; k < rules_.size(); ++k)
      if (std::search(history.begin(), history.end(), rules_[k].contains.begin(),
                      rules_[k].contains.end()) != history.end())
        return int64_t(k);
    return -1;
  }

  // Appends tokens to the history in pieces of kScriptPiece, asking `cancel` before each and
  // taking ms_per_token per token; a cancellation puts the history back as it was.
  static Status consume(ScriptedState& st, std::span<const int32_t> tokens, double ms_per_token,
                        const CancelCheck& cancel) {
    const int64_t n = int64_t(tokens.size()), n_past0 = st.n_past();
    for (int64_t i0 = 0; i0 < n; i0 += kScriptPiece) {
      if (cancel_requested(cancel)) {
        st.history.resize(size_t(n_past0));
        st.pos.predicted = -1;
        return forward_cancelled(i0, n);
      }
      const int64_t T = std::min(kScriptPiece, n - i0);
      if (ms_per_token > 0)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms_per_token * T));
      st.history.insert(st.history.end(), tokens.begin() + i0, tokens.begin() + i0 + T);
    }
    return {};
  }

  int64_t n_vocab_;
  std::vector<std::vector<int32_t>> replies_;
  std::vector<ScriptedRule> rules_;
  int32_t eos_;
  double prefill_ms_per_token_;
  int64_t requests_begun_ = 0;
};

}  // namespace

Expected<Script> load_script(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err(path, ": cannot open the script");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return err(path, ": not valid JSON");
  if (!j.is_object() || !j.contains("replies") || !j["replies"].is_array())
    return err(path, ": expected {\"replies\": [\"text\", ...]}");
  Script script;
  for (const auto& r : j["replies"]) {
    if (!r.is_string()) return err(path, ": every reply must be a string, not ", r.dump());
    script.replies.push_back(r.get<std::string>());
  }
  if (script.replies.empty()) return err(path, ": 'replies' is empty");
  if (j.contains("rules")) {
    if (!j["rules"].is_array()) return err(path, ": 'rules' must be a list");
    for (const auto& r : j["rules"]) {
      if (!r.is_object() || !r.contains("contains") || !r["contains"].is_string() ||
          r["contains"].get<std::string>().empty() || !r.contains("reply") ||
          !r["reply"].is_string())
        return err(path, ": every rule must be {\"contains\": non-empty text, \"reply\": text}, not ",
                   r.dump());
      script.rules.push_back({r["contains"].get<std::string>(), r["reply"].get<std::string>()});
    }
  }
  if (j.contains("prefill_ms_per_token")) {
    const auto& d = j["prefill_ms_per_token"];
    if (!d.is_number() || d.get<double>() < 0)
      return err(path, ": 'prefill_ms_per_token' must be a number >= 0, not ", d.dump());
    script.prefill_ms_per_token = d.get<double>();
  }
  return script;
}

Expected<std::vector<std::string>> load_script_replies(const std::string& path) {
  auto script = load_script(path);
  if (!script) return script.error();
  return std::move(script->replies);
}

std::unique_ptr<Backend> make_scripted_backend(int64_t n_vocab,
                                               std::vector<std::vector<int32_t>> replies,
                                               int32_t eos, double prefill_ms_per_token,
                                               std::vector<ScriptedRule> rules) {
  return std::make_unique<ScriptedBackend>(n_vocab, std::move(replies), eos, prefill_ms_per_token,
                                           std::move(rules));
}

Expected<std::unique_ptr<Backend>> load_scripted_backend(const std::string& path,
                                                         const Tokenizer& tok, int32_t eos) {
  auto script = load_script(path);
  if (!script) return script.error();
  const int64_t n_vocab = tok.vocab_size();
  if (eos < 0 || eos >= n_vocab)
    return err(path, ": end-of-sequence id ", eos, " is outside the vocabulary");
  std::vector<std::vector<int32_t>> replies;
  for (const auto& t : script->replies) replies.push_back(tok.encode(t));
  std::vector<ScriptedRule> rules;
  for (const auto& r : script->rules) rules.push_back({tok.encode(r.contains), tok.encode(r.reply)});
  return make_scripted_backend(n_vocab, std::move(replies), eos, script->prefill_ms_per_token,
                               std::move(rules));
}

}  // namespace orchid
