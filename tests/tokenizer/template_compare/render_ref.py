#!/usr/bin/env python3
"""Golden chat-template renders from Python Jinja2, set up exactly as transformers'
apply_chat_template does (utils/chat_template_utils.py: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; tojson = json.dumps(x, ensure_ascii=False, ...);
raise_exception and strftime_now globals; render(messages=, tools=, documents=None,
add_generation_prompt=, **kwargs)).

Every conversation of conversations.json is rendered with every template in templates/; the
results (text, or the exception raised) go to expected.json, which the gtest
ChatTemplateCompare.* compares with orchid byte for byte. Conversations without "raw" are
first normalised as orchid's ChatTemplate::render does (developer -> system, tool-call
arguments given as a JSON string -> object).

Usage (Debian python3-jinja2; pyenv's python may lack jinja2):
  /usr/bin/python3 render_ref.py                         # rewrite expected.json
  /usr/bin/python3 render_ref.py --check                 # re-render, compare with expected.json
  /usr/bin/python3 render_ref.py --check --orchid BIN    # also compare `BIN template` output
"""
import argparse
import copy
import json
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = Path(__file__).resolve().parent
TEMPLATES = ["qwen3.5-35b-a3b.jinja", "qwen3.6-35b-a3b.jinja", "qwen3.6-35b-a3b.unsloth.jinja"]


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def normalise(messages):
    """What orchid's ChatTemplate::render does to OpenAI messages before rendering."""
    out = copy.deepcopy(messages)
    for m in out:
        if m.get("role") == "developer":
            m["role"] = "system"
        for call in m.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            holder = call["function"] if isinstance(call.get("function"), dict) and "arguments" in call["function"] else call
            args = holder.get("arguments")
            if isinstance(args, str):
                holder["arguments"] = json.loads(args) if args.strip() else {}
    return out


def template_vars(conv):
    """The variables transformers passes to render()."""
    messages = conv["messages"] if conv.get("raw") else normalise(conv["messages"])
    tools = conv.get("tools")
    if not conv.get("raw") and not tools:
        tools = None  # orchid passes tools only when non-empty
    kw = dict(conv.get("kwargs", {}))
    for key in ("enable_thinking", "preserve_thinking"):
        if key in conv:
            kw[key] = conv[key]
    return dict(messages=messages, tools=tools, documents=None,
                add_generation_prompt=conv.get("add_generation_prompt", True), **kw)


def render_all(convs):
    results = {}
    for name in TEMPLATES:
        tpl = compile_template((HERE / "templates" / name).read_text(encoding="utf-8"))
        per = {}
        for conv in convs:
            try:
                per[conv["name"]] = {"text": tpl.render(**template_vars(conv))}
            except Exception as e:  # noqa: BLE001 - any exception is an expected error outcome
                per[conv["name"]] = {"error": type(e).__name__, "message": str(e)}
        results[name] = per
    return {"jinja2": jinja2.__version__, "templates": results}


def check_orchid(binary, convs, expected):
    """Runs `orchid template` on every non-raw conversation; returns the number of mismatches."""
    bad = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in TEMPLATES:
            model = tmp / name
            model.mkdir()
            (model / "chat_template.jinja").write_bytes((HERE / "templates" / name).read_bytes())
            for conv in convs:
                if conv.get("raw"):
                    continue
                total += 1
                body = tmp / "request.json"
                body.write_text(json.dumps({"messages": conv["messages"], "tools": conv.get("tools")},
                                           ensure_ascii=False), encoding="utf-8")
                cmd = [binary, "template", "-m", str(model), "--messages", str(body)]
                kw = dict(conv.get("kwargs", {}))
                if conv.get("enable_thinking") is False:
                    cmd.append("--no-thinking")
                elif "enable_thinking" in conv:
                    kw["enable_thinking"] = conv["enable_thinking"]
                if conv.get("preserve_thinking") is True:
                    cmd.append("--preserve-thinking")
                elif "preserve_thinking" in conv:
                    kw["preserve_thinking"] = conv["preserve_thinking"]
                if conv.get("add_generation_prompt") is False:
                    cmd.append("--no-generation-prompt")
                if kw:
                    cmd += ["--kwargs", json.dumps(kw)]
                r = subprocess.run(cmd, capture_output=True)
                want = expected["templates"][name][conv["name"]]
                if "text" in want:
                    ok = r.returncode == 0 and r.stdout == want["text"].encode("utf-8")
                else:
                    ok = r.returncode != 0 and (want["error"] != "TemplateError" or
                                                want["message"].encode() in r.stderr)
                if not ok:
                    bad += 1
                    print(f"orchid template differs: {name} / {conv['name']} (exit {r.returncode})\n"
                          f"  stderr: {r.stderr.decode(errors='replace')[:300]}")
    print(f"orchid template: {total - bad}/{total} renders identical")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with expected.json instead of writing it")
    ap.add_argument("--orchid", help="path of the orchid binary to compare too (with --check)")
    args = ap.parse_args()
    convs = json.loads((HERE / "conversations.json").read_text(encoding="utf-8"))
    fresh = render_all(convs)
    n = len(convs) * len(TEMPLATES)
    if not args.check:
        with open(HERE / "expected.json", "w", encoding="utf-8") as f:
            json.dump(fresh, f, ensure_ascii=False, indent=1)
            f.write("\n")
        errors = sum("error" in r for t in fresh["templates"].values() for r in t.values())
        print(f"wrote expected.json: {n} renders ({errors} expected errors), jinja2 {fresh['jinja2']}")
        return 0
    expected = json.loads((HERE / "expected.json").read_text(encoding="utf-8"))
    stale = [(t, c) for t in TEMPLATES for c in fresh["templates"][t]
             if fresh["templates"][t][c] != expected["templates"].get(t, {}).get(c)]
    for t, c in stale[:10]:
        print(f"expected.json is stale for {t} / {c}: re-run render_ref.py")
    print(f"Python Jinja2 {fresh['jinja2']}: {n - len(stale)}/{n} renders match expected.json")
    bad = len(stale)
    if args.orchid:
        bad += check_orchid(args.orchid, convs, expected)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
