// A test backend that replays scripted replies instead of running a model, so end-to-end
// tests can drive reasoning, tool-call and stop paths deterministically through the real
// engine, sampler and server. Its vocabulary is the tokenizer's; each reply is given as text
// in a JSON file {"replies": ["...", ...]} and encoded with the model's tokenizer at load.
//
// The rule. Every forward's logits are 0 except SCRIPT_LOGIT (100) on the scripted next token,
// so greedy decoding and sampling (any temperature up to 2, top-k/p, min-p, the usual
// penalties) pick it. The next token is reply[r][m] while m < |reply r|, then `eos` forever:
//  - r: Engine::generate restores exactly one snapshot (cached or empty) per request before
//    its prefill, so each successful restore() starts a request: r = (requests begun - 1) mod n.
//    Request i (0-based) thus gets reply i mod n.
//  - m: how much of the reply the state has been fed back. A forward of one token that is the
//    token just scripted is a decode step: m += 1. Any other forward (the prompt, in one or more
//    chunks) sets m = 0: the reply starts right after the prompt, whatever the prompt ends with
//    (a thinking prompt ends with "<think>\n", which the reasoning reply also starts with). A
//    prompt chunk of exactly the one scripted token would be misread as a decode step; chat
//    prompts end with a generation prompt of several tokens, so this does not happen there.
//
// Rules. With "rules": [{"contains": TEXT, "reply": REPLY}, ...] in the script, a request whose
// prompt holds TEXT (its tokens, contiguous, anywhere in the state's history) gets the first
// such rule's REPLY instead; "replies" stays the fallback. So an agent's loop is scripted by
// what its prompt holds — e.g. a tool call until "<tool_response>" appears, then the answer —
// whatever side requests (titles, summaries) come in between.
//
// Cancellation. With "prefill_ms_per_token": x in the script, a prompt forward sleeps x ms per
// token, in pieces of kScriptPiece tokens, and asks its CancelCheck before each piece (decode
// steps take no time and ask once), so server tests can cancel a slow prefill. A cancelled
// forward leaves the history as it was before the call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "orchid/backend/backend.h"
#include "orchid/util/status.h"

namespace orchid {

class Tokenizer;

inline constexpr float kScriptLogit = 100.f;
inline constexpr int64_t kScriptPiece = 16;  // prompt tokens between cancellation checks

struct ScriptRule {
  std::string contains, reply;
};

struct Script {
  std::vector<std::string> replies;
  std::vector<ScriptRule> rules;  // tried in order before `replies`
  double prefill_ms_per_token = 0;  // time a prompt forward takes per token
};

// Reads {"replies": ["text", ...], "rules": [{"contains", "reply"}, ...], "prefill_ms_per_token":
// x} (at least one reply, each a string; rules and the delay are optional, the delay a number
// ≥ 0). Errors name the file.
Expected<Script> load_script(const std::string& path);
// load_script's replies.
Expected<std::vector<std::string>> load_script_replies(const std::string& path);

// A rule as token ids: the pattern the history must hold, and the reply.
struct ScriptedRule {
  std::vector<int32_t> contains, reply;
};

// PRECONDITION: replies is not empty; every id (and eos) is in [0, n_vocab); rule patterns are
// not empty.
std::unique_ptr<Backend> make_scripted_backend(int64_t n_vocab,
                                               std::vector<std::vector<int32_t>> replies,
                                               int32_t eos, double prefill_ms_per_token = 0,
                                               std::vector<ScriptedRule> rules = {});

// The script at `path` encoded with `tok`; the backend's vocabulary is the tokenizer's.
Expected<std::unique_ptr<Backend>> load_scripted_backend(const std::string& path,
                                                         const Tokenizer& tok, int32_t eos);

}  // namespace orchid
