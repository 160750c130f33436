// Tokenizer: interprets tokenizer.json's sections, then runs the pipeline
//   bytes → lossy UTF-8 → raw added tokens → per piece: NFC → normalized added tokens →
//   Split regex → ByteLevel + BPE (cached)
// and decodes ids through a table of each id's raw bytes.
#include "orchid/tokenizer/tokenizer.h"

#include <unordered_map>
#include <unordered_set>

#include "orchid/tokenizer/added_tokens.h"
#include "orchid/tokenizer/bpe.h"
#include "orchid/tokenizer/byte_level.h"
#include "orchid/tokenizer/pretokenizer.h"
#include "orchid/tokenizer/tokenizer_json.h"
#include "orchid/tokenizer/unicode.h"
#include "orchid/util/mapped_file.h"

namespace orchid {

namespace {

using json = nlohmann::json;

// The regex of a ByteLevel pre-tokenizer with use_regex (GPT-2's).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr uint8_t kPresent = 1, kSpecial = 2;

std::string type_of(const json& j) {
  if (j.is_object() && j.contains("type") && j["type"].is_string())
    return j["type"].get<std::string>();
  return "";
}

bool bool_field(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// normalizer: null, NFC, or a Sequence of NFCs. Returns whether NFC runs.
Expected<bool> read_normalizer(const json& n) {
  if (n.is_null()) return false;
  std::string type = type_of(n);
  if (type == "NFC") return true;
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    bool nfc = false;
    for (const json& part : n["normalizers"]) {
      auto r = read_normalizer(part);
      if (!r) return r;
      nfc = nfc || *r;
    }
    return nfc;
  }
  return err("normalizer: type '", type.empty() ? n.dump() : type,
             "' is not supported (orchid implements NFC or none)");
}

Expected<PreTokenizer> read_byte_level(const json& b, bool alone) {
  if (bool_field(b, "add_prefix_space", false))
    return err("pre_tokenizer: ByteLevel with add_prefix_space true is not supported");
  if (bool_field(b, "use_regex", true)) {
    if (!alone)
      return err("pre_tokenizer: ByteLevel with use_regex true after a Split is not supported");
    return PreTokenizer::split(kGpt2Pattern, true);
  }
  return PreTokenizer::whole();
}

Expected<PreTokenizer> read_split(const json& s) {
  const json* pattern = s.contains("pattern") ? &s["pattern"] : nullptr;
  if (!pattern || !pattern->is_object())
    return err("pre_tokenizer: Split without a pattern object {\"Regex\": ...}");
  std::string behavior = s.value("behavior", std::string("Isolated"));
  if (behavior != "Isolated")
    return err("pre_tokenizer: Split behavior '", behavior,
               "' is not supported (orchid implements Isolated)");
  if (bool_field(s, "invert", false))
    return err("pre_tokenizer: Split with invert true is not supported");
  if (pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
    auto p = PreTokenizer::split((*pattern)["Regex"].get<std::string>(), true);
    if (!p) return err("pre_tokenizer: ", p.message());
    return p;
  }
  if (pattern->contains("String") && (*pattern)["String"].is_string())
    return PreTokenizer::split((*pattern)["String"].get<std::string>(), false);
  return err("pre_tokenizer: Split pattern must be {\"Regex\": string} or {\"String\": string}");
}

Expected<PreTokenizer> read_pre_tokenizer(const json& p) {
  std::string type = type_of(p);
  if (type == "ByteLevel") return read_byte_level(p, true);
  if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
    const json& parts = p["pretokenizers"];
    if (parts.size() == 1 && type_of(parts[0]) == "ByteLevel")
      return read_byte_level(parts[0], true);
    if (parts.size() == 2 && type_of(parts[0]) == "Split" && type_of(parts[1]) == "ByteLevel") {
      auto byte_level = read_byte_level(parts[1], false);
      if (!byte_level) return byte_level;
      return read_split(parts[0]);
    }
  }
  return err("pre_tokenizer: ",
             p.is_null() ? std::string("missing") : "'" + p.dump(-1).substr(0, 200) + "'",
             " is not supported (orchid needs Sequence[Split, ByteLevel] or ByteLevel)");
}

// The model's fields other than vocab and merges.
Status read_model_options(const json& m, BpeSpec& spec) {
  if (m.contains("vocab_invalid"))
    return err("model.vocab: expected an object of token → id, got ",
               m["vocab_invalid"].type_name());
  if (m.contains("merges_invalid"))
    return err("model.merges: expected an array, got ", m["merges_invalid"].type_name());
  if (m.contains("type") && !(m["type"].is_string() && m["type"].get<std::string>() == "BPE"))
    return err("model.type ", m["type"].dump(), " is not supported (orchid runs BPE)");
  if (m.contains("dropout") && !m["dropout"].is_null() &&
      !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
    return err("model.dropout ", m["dropout"].dump(), " is not supported (must be null)");
  if (bool_field(m, "byte_fallback", false))
    return err("model.byte_fallback true is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m[key].is_null() &&
        !(m[key].is_string() && m[key].get<std::string>().empty()))
      return err("model.", key, " ", m[key].dump(), " is not supported (must be null or \"\")");
  }
  if (m.contains("unk_token") && m["unk_token"].is_string())
    spec.unk_token = m["unk_token"].get<std::string>();
  spec.fuse_unk = bool_field(m, "fuse_unk", false);
  spec.ignore_merges = bool_field(m, "ignore_merges", false);
  return {};
}

Expected<std::vector<AddedToken>> read_added_tokens(const json& a) {
  std::vector<AddedToken> tokens;
  if (a.is_null()) return tokens;
  if (!a.is_array()) return err("added_tokens: expected an array");
  for (size_t i = 0; i < a.size(); ++i) {
    const json& t = a[i];
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string())
      return err("added_tokens[", i, "]: expected an object with a string \"content\"");
    if (!t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() >= (int64_t(1) << 24))
      return err("added_tokens[", i, "] (", t["content"].get<std::string>(),
                 "): expected an integer \"id\" in 0..2^24-1");
    AddedToken tok;
    tok.content = t["content"].get<std::string>();
    tok.id = t["id"].get<int32_t>();
    tok.special = bool_field(t, "special", false);
    tok.single_word = bool_field(t, "single_word", false);
    tok.lstrip = bool_field(t, "lstrip", false);
    tok.rstrip = bool_field(t, "rstrip", false);
    tok.normalized = bool_field(t, "normalized", !tok.special);
    tokens.push_back(std::move(tok));
  }
  return tokens;
}

// Per-thread buffers for encode.
struct EncodeScratch {
  std::string repaired;
  std::string normalized;
  std::vector<AddedTokenSplitter::Segment> raw_segments, norm_segments;
  std::vector<std::string_view> words;
};

EncodeScratch& encode_scratch() {
  thread_local EncodeScratch s;
  return s;
}

}  // namespace

struct Tokenizer::Impl {
  BpeModel bpe;
  PreTokenizer pretok = PreTokenizer::whole();
  bool nfc = false;
  AddedTokenSplitter raw_added, normalized_added;
  std::unordered_map<std::string, int32_t> added_ids;  // content → id
  // id → raw bytes (decode), and kPresent / kSpecial flags.
  std::string piece_bytes;
  std::vector<uint32_t> piece_offsets;
  std::vector<uint8_t> piece_flags;
  int64_t vocab_size = 0;

  explicit Impl(BpeModel m) : bpe(std::move(m)) {}
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids, EncodeScratch& st) const;
  void encode_words(std::string_view text, std::vector<int32_t>& ids, EncodeScratch& st) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::load(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  auto bytes = file->bytes();
  return from_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                   path);
}

Expected<Tokenizer> Tokenizer::from_json(std::string_view text, const std::string& name) {
  auto fail = [&](const std::string& message) { return err(name, ": ", message); };
  unicode::CharTable::get();  // built once per process; counted in load time, not first encode
  auto parsed = parse_tokenizer_json(text);
  if (!parsed) return fail(parsed.message());
  TokenizerJson& tj = *parsed;
  const json& sec = tj.sections;
  if (sec.contains("model_invalid"))
    return fail(std::string("model: expected an object, got ") + sec["model_invalid"].type_name());
  if (!tj.has_model) return fail("missing \"model\" (the BPE vocabulary and merges)");
  if (!tj.has_vocab && !tj.model.contains("vocab_invalid")) return fail("missing model.vocab");
  if (!tj.has_merges && !tj.model.contains("merges_invalid")) return fail("missing model.merges");
  if (Status s = read_model_options(tj.model, tj.bpe); !s) return fail(s.message());

  auto normalizer = read_normalizer(sec.value("normalizer", json()));
  if (!normalizer) return fail(normalizer.message());
  auto pretok = read_pre_tokenizer(sec.value("pre_tokenizer", json()));
  if (!pretok) return fail(pretok.message());
  json decoder = sec.value("decoder", json());
  if (type_of(decoder) != "ByteLevel")
    return fail("decoder: " + (decoder.is_null() ? std::string("missing") : decoder.dump()) +
                " is not supported (orchid needs ByteLevel)");
  auto added = read_added_tokens(sec.value("added_tokens", json()));
  if (!added) return fail(added.message());

  auto model = BpeModel::build(std::move(tj.bpe));
  if (!model) return fail(model.message());
  auto impl = std::make_unique<Impl>(std::move(*model));
  impl->pretok = std::move(*pretok);
  impl->nfc = *normalizer;

  // Added-token ids as the tokenizers crate assigns them (it ignores the "id" fields): an
  // earlier added token's id or the vocabulary id if the content has one, else the next id after
  // the vocabulary (counted as entries) and the added tokens so far. In a consistent file these
  // are the file's ids.
  std::unordered_map<int32_t, const AddedToken*> added_by_id;
  std::unordered_set<std::string> special_contents;
  const int64_t vocab_count = int64_t(impl->bpe.vocab_count());
  int64_t max_added = -1;
  int64_t limit = impl->bpe.id_limit();
  for (AddedToken& t : *added) {
    if (t.content.empty()) continue;
    if (auto it = impl->added_ids.find(t.content); it != impl->added_ids.end())
      t.id = it->second;
    else if (auto vid = impl->bpe.token_id(t.content))
      t.id = *vid;
    else
      t.id = int32_t(max_added < 0                                    ? vocab_count
                     : (max_added >= vocab_count || vocab_count == 0) ? max_added + 1
                                                                      : vocab_count);
    max_added = std::max<int64_t>(max_added, t.id);
    impl->added_ids[t.content] = t.id;
    added_by_id[t.id] = &t;
    if (t.special) special_contents.insert(t.content);
    limit = std::max<int64_t>(limit, int64_t(t.id) + 1);
    if (t.normalized && impl->nfc) {
      std::string pattern;
      unicode::append_nfc(t.content, pattern);
      impl->normalized_added.add(std::move(pattern), t);
    } else {
      (t.normalized ? impl->normalized_added : impl->raw_added).add(t.content, t);
    }
  }
  impl->raw_added.finish();
  impl->normalized_added.finish();
  impl->vocab_size = limit;

  // Decode table: the ByteLevel decoder maps each token's characters back to bytes, or keeps
  // the token's own UTF-8 when a character is outside the alphabet.
  impl->piece_offsets.reserve(size_t(limit) + 1);
  impl->piece_bytes.reserve(size_t(limit) * 8);
  impl->piece_flags.assign(size_t(limit), 0);
  for (int32_t id = 0; id < int32_t(limit); ++id) {
    impl->piece_offsets.push_back(uint32_t(impl->piece_bytes.size()));
    std::optional<std::string_view> text;
    if (auto it = added_by_id.find(id); it != added_by_id.end())
      text = it->second->content;
    else
      text = impl->bpe.token_text(id);
    if (!text) continue;
    if (!byte_level::text_to_bytes(*text, impl->piece_bytes)) impl->piece_bytes.append(*text);
    impl->piece_flags[size_t(id)] =
        kPresent | (special_contents.count(std::string(*text)) ? kSpecial : 0);
  }
  impl->piece_offsets.push_back(uint32_t(impl->piece_bytes.size()));
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_words(std::string_view text, std::vector<int32_t>& ids,
                                   EncodeScratch& st) const {
  for (size_t pos = 0; pos < text.size();) {
    st.words.clear();
    pos = pretok.run(text, pos, st.words);
    bpe.encode_words(st.words, ids);
  }
}

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& ids,
                                   EncodeScratch& st) const {
  std::string_view text = piece;
  if (nfc && !unicode::nfc_quick_check(piece)) {
    st.normalized.clear();
    st.normalized.reserve(piece.size() + piece.size() / 8);
    unicode::append_nfc(piece, st.normalized);
    text = st.normalized;
  }
  if (normalized_added.empty()) return encode_words(text, ids, st);
  st.norm_segments.clear();
  normalized_added.split(text, st.norm_segments);
  for (const auto& seg : st.norm_segments) {
    if (seg.id >= 0)
      ids.push_back(seg.id);
    else
      encode_words(text.substr(seg.begin, seg.end - seg.begin), ids, st);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  EncodeScratch& st = encode_scratch();
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (size_t valid = unicode::valid_utf8_prefix(text); valid < text.size()) {
    st.repaired.assign(text.substr(0, valid));
    st.repaired.reserve(text.size() + text.size() / 4);
    unicode::append_utf8_lossy(text.substr(valid), st.repaired);
    text = st.repaired;
  }
  if (impl_->raw_added.empty()) {
    impl_->encode_piece(text, ids, st);
  } else {
    st.raw_segments.clear();
    impl_->raw_added.split(text, st.raw_segments);
    for (const auto& seg : st.raw_segments) {
      if (seg.id >= 0)
        ids.push_back(seg.id);
      else
        impl_->encode_piece(text.substr(seg.begin, seg.end - seg.begin), ids, st);
    }
  }
  // Per-thread buffers sized by one huge input are not kept.
  constexpr size_t kKeep = size_t(16) << 20;
  if (st.repaired.capacity() > kKeep) std::string().swap(st.repaired);
  if (st.normalized.capacity() > kKeep) std::string().swap(st.normalized);
  return ids;
}

Expected<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= impl_->vocab_size || !(impl_->piece_flags[size_t(id)] & kPresent))
      return err("decode: id ", id, " at position ", i, " is not in the vocabulary (size ",
                 impl_->vocab_size, ")");
    if (skip_special && (impl_->piece_flags[size_t(id)] & kSpecial)) continue;
    bytes.append(impl_->piece_bytes, impl_->piece_offsets[size_t(id)],
                 impl_->piece_offsets[size_t(id) + 1] - impl_->piece_offsets[size_t(id)]);
  }
  if (unicode::is_valid_utf8(bytes)) return bytes;
  std::string text;
  unicode::append_utf8_lossy(bytes, text);
  return text;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token_text) const {
  if (auto it = impl_->added_ids.find(std::string(token_text)); it != impl_->added_ids.end())
    return it->second;
  return impl_->bpe.token_id(token_text);
}

std::optional<std::string_view> Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size || !(impl_->piece_flags[size_t(id)] & kPresent))
    return std::nullopt;
  return std::string_view(impl_->piece_bytes)
      .substr(impl_->piece_offsets[size_t(id)],
              impl_->piece_offsets[size_t(id) + 1] - impl_->piece_offsets[size_t(id)]);
}

int64_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->vocab_size && (impl_->piece_flags[size_t(id)] & kSpecial);
}

const char* Tokenizer::pretokenizer_engine() const {
  switch (impl_->pretok.engine()) {
    case PreTokenizer::Engine::qwen2:
      return "qwen2";
    case PreTokenizer::Engine::qwen35:
      return "qwen35";
    case PreTokenizer::Engine::regex:
      return "regex";
    case PreTokenizer::Engine::literal:
      return "literal";
    case PreTokenizer::Engine::none:
      return "none";
  }
  return "none";
}

}  // namespace orchid
