#!/usr/bin/env python3
"""The demo model's training corpus (issue 7), from freely licensed Debian packages
(scripts/demo-model/install-corpus-deps.sh installs them; licences in docs/demo-model.md):

  WordNet 3.0 (wordnet-base)   each lemma's most frequent sense: gloss and examples
  Python 3.11 docs (python3.11-doc)  the reST sources of the tutorial, HOWTOs, FAQ, reference
  fortune cookies (fortunes, fortunes-min)  quotations from a fixed list of files

Text is NFC-normalised, control characters dropped, whitespace collapsed, exact duplicates
removed. The held-out split is ~5 % by a hash of each item's key (the lemma for WordNet, so
held-out "What does X mean?" questions ask about words the model never saw defined). The chat
part asks "What does X mean?" of WordNet lemmas and answers with the gloss and an example; it is
rendered with the official Qwen3.6 chat template (orchid's built-in copy), thinking off, through
the transformers-equivalent Jinja2 setup of tests/tokenizer/template_compare/render_ref.py.

Usage: scripts/demo-model/make_corpus.py --out DIR
Writes DIR/{train,heldout}.txt (one document per paragraph, blank-line separated),
DIR/chat_{train,heldout}.jsonl (messages), DIR/chat_{train,heldout}.txt (rendered) and
DIR/stats.json.
"""
import argparse
import hashlib
import json
import re
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/tokenizer/template_compare"))
from render_ref import compile_template  # noqa: E402

WORDNET = Path("/usr/share/wordnet")
PYDOC = Path("/usr/share/doc/python3.11/html/_sources")
FORTUNES = Path("/usr/share/games/fortunes")
PYDOC_PARTS = ["tutorial", "howto", "faq", "reference", "glossary.rst.txt"]
FORTUNE_FILES = ["fortunes", "wisdom", "literature", "science", "platitudes", "riddles",
                 "people", "work", "education", "miscellaneous", "humorists", "love", "tao"]
POS_NAME = {"noun": "noun", "verb": "verb", "adj": "adjective", "adv": "adverb"}
HELDOUT_PERCENT = 5


def clean(text):
    text = unicodedata.normalize("NFC", text)
    text = "".join(c for c in text if c in "\n\t" or unicodedata.category(c)[0] != "C")
    return re.sub(r"[ \t]+", " ", re.sub(r"\s*\n\s*", " ", text)).strip()


def held_out(key):
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % 100 < HELDOUT_PERCENT


def wordnet_entries():
    """(lemma, part of speech, definition, examples) of each single-word lemma's first sense."""
    for pos in ("noun", "verb", "adj", "adv"):
        synsets = {}
        for line in (WORDNET / f"data.{pos}").open(encoding="latin-1"):
            if line.startswith("  ") or "|" not in line:
                continue  # the licence header
            f = line.split("|", 1)[0].split()
            offset, n_words = f[0], int(f[3], 16)
            words = [re.sub(r"\(.*\)$", "", w) for w in f[4:4 + 2 * n_words:2]]
            parts = [p.strip() for p in line.split("|", 1)[1].strip().split(";")]
            examples = [p.strip('"') for p in parts[1:] if p.startswith('"')]
            synsets[offset] = (words, parts[0], examples)
        for line in (WORDNET / f"index.{pos}").open(encoding="latin-1"):
            if line.startswith("  "):
                continue
            f = line.split()
            lemma, n_synsets = f[0], int(f[2])
            if not re.fullmatch(r"[a-z]{3,}", lemma):
                continue
            first = f[len(f) - n_synsets]  # senses are listed most frequent first
            words, definition, examples = synsets[first]
            # The synset's spelling of the lemma (index lemmas are lower case: "aachen").
            word = next((w for w in words if w.lower() == lemma), lemma)
            yield word, POS_NAME[pos], definition, examples


def pydoc_paragraphs():
    files = []
    for part in PYDOC_PARTS:
        p = PYDOC / part
        files += sorted(p.rglob("*.rst.txt")) if p.is_dir() else [p]
    for f in files:
        block = []
        for line in f.read_text(encoding="utf-8").splitlines() + [""]:
            # Prose only: directives, code blocks, tables and headings' underlines are skipped.
            if line.strip() and not line.startswith((" ", "\t", "..", "=", "-", "*", "+", "|", ">>>")):
                block.append(line)
                continue
            text = clean(" ".join(block))
            block = []
            text = re.sub(r":[a-z]+:`~?([^`<]*?)(?: <[^>]*>)?`", r"\1", text)  # :role:`x` → x
            text = re.sub(r"``([^`]*)``", r"\1", text).replace("`", "")
            text = re.sub(r"::$", ":", text)  # reST's literal-block marker
            if len(text) >= 80 and text[-1] in ".:?!)":
                yield f"{f.relative_to(PYDOC)}:{text[:40]}", text


def fortune_quotes():
    for name in FORTUNE_FILES:
        raw = (FORTUNES / name).read_text(encoding="utf-8", errors="replace")
        for quote in raw.split("\n%\n"):
            text = clean(quote.replace("\n", " "))
            if 20 <= len(text) <= 600 and "\ufffd" not in text:
                yield f"{name}:{text[:40]}", text


def chat(lemma, pos, definition, examples):
    answer = f'"{lemma}" is a {pos} meaning {definition}.'
    if examples:
        answer += f' For example: "{examples[0]}".'
    return [{"role": "user", "content": f"What does {lemma} mean?"},
            {"role": "assistant", "content": answer}]


def template_source():
    inc = (ROOT / "src/orchid/tokenizer/builtin/qwen3.6-35b-a3b.jinja.inc").read_text()
    return inc.split('R"orchid_jinja(', 1)[1].rsplit(')orchid_jinja"', 1)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    template = compile_template(template_source())
    text = {"train": [], "heldout": []}
    chats = {"train": [], "heldout": []}
    stats = {"sources": {}}
    seen = set()

    def add(source, key, doc):
        if doc in seen:
            return
        seen.add(doc)
        split = "heldout" if held_out(key) else "train"
        text[split].append(doc)
        s = stats["sources"].setdefault(source, {"train": [0, 0], "heldout": [0, 0]})
        s[split][0] += 1
        s[split][1] += len(doc.encode())

    for lemma, pos, definition, examples in wordnet_entries():
        doc = f"{lemma} ({pos}): {definition}."
        if examples:
            doc += " " + " ".join(f'"{e}"' for e in examples)
        add("wordnet", lemma, clean(doc))
        split = "heldout" if held_out(lemma) else "train"
        chats[split].append(chat(lemma, pos, clean(definition), [clean(e) for e in examples]))
    for key, doc in pydoc_paragraphs():
        add("python-docs", key, doc)
    for key, doc in fortune_quotes():
        add("fortunes", key, doc)

    for split in ("train", "heldout"):
        (args.out / f"{split}.txt").write_text("\n\n".join(text[split]) + "\n", encoding="utf-8")
        with (args.out / f"chat_{split}.jsonl").open("w", encoding="utf-8") as f:
            for messages in chats[split]:
                f.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
        rendered = [template.render(messages=m, tools=None, documents=None,
                                    add_generation_prompt=False, enable_thinking=False)
                    for m in chats[split]]
        (args.out / f"chat_{split}.txt").write_text("".join(rendered), encoding="utf-8")
        stats[f"chat_{split}"] = len(chats[split])
        stats[f"{split}_bytes"] = sum(len(d.encode()) + 2 for d in text[split])
    (args.out / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
