#!/usr/bin/env python3
"""Writes conversations.json: the chat-template test conversations, hand-written ones that
each target a feature of the Qwen3.5/3.6 templates, plus seeded random mixes of them.

Each entry: {"name", "messages", "tools"?, "add_generation_prompt"?, "enable_thinking"?,
"preserve_thinking"?, "kwargs"?, "raw"?}. "raw": true renders without orchid's message
normalisation (developer -> system, JSON-string tool arguments -> object), i.e. exactly what
transformers would pass, to compare the interpreter on inputs the templates reject.

Usage: python3 make_conversations.py   (then render_ref.py to refresh expected.json)
"""
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "days": {"type": "integer"},
                "metric": {"type": "boolean"},
            },
            "required": ["city"],
        },
    },
}
# Nested schema, non-ASCII text (ensure_ascii=False keeps it), quotes, backslashes, newlines.
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Recherche « plein texte » dans la base — 文档搜索 🔎.\nUse \"quotes\" and back\\slashes.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Requête, ex. « café »"},
                "filters": {
                    "type": "object",
                    "properties": {
                        "lang": {"type": "string", "enum": ["fr", "zh", "en"]},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "range": {
                            "type": "object",
                            "properties": {"from": {"type": "number"}, "to": {"type": "number"}},
                        },
                    },
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                "score": {"type": "number", "default": 0.5},
            },
            "required": ["query"],
        },
    },
}
NOARGS = {"type": "function", "function": {"name": "now", "description": "Current time.",
                                           "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, SEARCH]

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "What is the capital of France?"}
A1 = {"role": "assistant", "content": "The capital of France is Paris.",
      "reasoning_content": "Simple geography question."}
U2 = {"role": "user", "content": "And of Germany?"}


def call(name, args, cid="call_1", wrap=True):
    fn = {"name": name, "arguments": args}
    return {"id": cid, "type": "function", "function": fn} if wrap else fn


def tool(content, cid="call_1"):
    return {"role": "tool", "tool_call_id": cid, "content": content}


WEATHER_CALL = {"role": "assistant", "content": "", "reasoning_content": "I should call get_weather.",
                "tool_calls": [call("get_weather", {"city": "Paris", "days": 1, "metric": True})]}
WEATHER_RESULT = tool('{"temp_c": 18, "sky": "cloudy"}')
ANSWER = {"role": "assistant", "content": "It is 18 °C and cloudy in Paris.",
          "reasoning_content": "Summarise the tool result."}

HAND = [
    {"name": "plain_single_user", "messages": [{"role": "user", "content": "Hi!"}]},
    {"name": "system_and_user", "messages": [SYS, {"role": "user", "content": "Hello"}]},
    {"name": "multi_turn_reasoning", "messages": [SYS, U1, A1, U2]},
    {"name": "multi_turn_preserve_thinking", "messages": [SYS, U1, A1, U2], "preserve_thinking": True},
    {"name": "multi_turn_preserve_thinking_false", "messages": [SYS, U1, A1, U2], "preserve_thinking": False},
    {"name": "enable_thinking_false", "messages": [{"role": "user", "content": "Hi!"}], "enable_thinking": False},
    {"name": "enable_thinking_true", "messages": [{"role": "user", "content": "Hi!"}], "enable_thinking": True},
    {"name": "no_generation_prompt", "messages": [SYS, U1, A1], "add_generation_prompt": False},
    {"name": "no_generation_prompt_thinking_false", "messages": [U1], "add_generation_prompt": False,
     "enable_thinking": False},
    {"name": "developer_role", "messages": [{"role": "developer", "content": "Answer in French."}, U1]},
    {"name": "developer_then_system", "messages": [
        {"role": "developer", "content": "Be brief."}, SYS, U1]},
    {"name": "developer_role_raw", "raw": True, "messages": [
        {"role": "developer", "content": "Answer in French."}, U1]},
    {"name": "think_in_content", "messages": [
        U1, {"role": "assistant", "content": "<think>\nGeography.\n</think>\n\nParis."}]},
    {"name": "think_in_content_past_turn", "messages": [
        U1, {"role": "assistant", "content": "<think>Geography.</think>Paris."}, U2]},
    {"name": "close_think_only_in_content", "messages": [
        U1, {"role": "assistant", "content": "reasoning without an opening tag</think>\n\nParis."}]},
    {"name": "reasoning_and_think_in_content", "messages": [
        U1, {"role": "assistant", "content": "<think>ignored</think>Paris.", "reasoning_content": "  padded reasoning \n"}]},
    {"name": "empty_reasoning_after_query", "messages": [
        U1, {"role": "assistant", "content": "Paris.", "reasoning_content": ""}]},
    {"name": "tools_call_object_args", "tools": [WEATHER],
     "messages": [SYS, {"role": "user", "content": "What's the weather in Paris?"}, WEATHER_CALL, WEATHER_RESULT]},
    {"name": "tools_call_string_args", "tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("get_weather", '{"city": "Paris", "days": 3, "metric": false}')]},
        WEATHER_RESULT]},
    {"name": "tools_call_string_args_raw", "raw": True, "tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("get_weather", '{"city": "Paris"}')]},
        WEATHER_RESULT]},
    {"name": "tools_call_value_types", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Search"},
        {"role": "assistant", "content": "", "tool_calls": [call("search_docs", {
            "query": "café\nline two", "filters": {"lang": "fr", "tags": ["a", "é"], "range": {"from": 1.5, "to": 1e20}},
            "limit": 10, "score": 1.0, "exact": False, "cursor": None, "ids": [1, 2.5, True, None],
            "neg": -0.001, "big": 12345678901234567})]},
        tool("[]")]},
    {"name": "multiple_tool_calls", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris and Berlin?"},
        {"role": "assistant", "content": "Let me check both.", "reasoning_content": "Two calls.", "tool_calls": [
            call("get_weather", {"city": "Paris"}, "c1"), call("get_weather", {"city": "Berlin"}, "c2"),
            call("search_docs", '{"query": "météo"}', "c3")]},
        tool("sunny", "c1"), tool("rain", "c2"), tool("no results", "c3"),
        {"role": "assistant", "content": "Paris is sunny, Berlin rainy."},
        {"role": "user", "content": "Thanks!"}]},
    {"name": "multi_step_tools_keep_reasoning", "tools": [WEATHER], "messages": [
        SYS, {"role": "user", "content": "Plan a trip."},
        {"role": "assistant", "content": "", "reasoning_content": "step 1", "tool_calls": [call("get_weather", {"city": "Rome"})]},
        tool("hot"),
        {"role": "assistant", "content": "", "reasoning_content": "step 2", "tool_calls": [call("get_weather", {"city": "Oslo"})]},
        tool("cold")]},
    {"name": "tool_call_unwrapped_function", "tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Lima"}, wrap=False)]},
        tool("mild")]},
    {"name": "tool_call_empty_string_args", "tools": [NOARGS], "messages": [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": "", "tool_calls": [call("now", "")]}, tool("12:00")]},
    {"name": "tool_first_after_user", "messages": [{"role": "user", "content": "x"}, tool("orphan result")]},
    {"name": "tool_response_as_user_content", "messages": [
        {"role": "user", "content": "Real question"},
        {"role": "assistant", "content": "ok", "reasoning_content": "r1"},
        {"role": "user", "content": "<tool_response>\nresult\n</tool_response>"}]},
    {"name": "tools_empty_list", "tools": [], "messages": [U1]},
    {"name": "tools_without_system", "tools": TOOLS, "messages": [U1]},
    {"name": "tools_with_list_system_content", "tools": [WEATHER], "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]}, U1]},
    {"name": "content_text_parts", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "System part."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "world"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hi there."}]},
        {"role": "user", "content": [{"text": "no type key"}]}]},
    {"name": "image_and_video_parts", "messages": [
        {"role": "user", "content": [{"type": "image", "image": "a.png"}, {"type": "text", "text": "Describe."},
                                     {"type": "video", "video": "b.mp4"}, {"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"name": "image_parts_with_vision_ids", "kwargs": {"add_vision_id": True}, "messages": [
        {"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "Compare."}]},
        {"role": "assistant", "content": "They differ."},
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "And this?"}]}]},
    {"name": "empty_contents", "messages": [
        {"role": "system", "content": ""}, {"role": "user", "content": ""},
        {"role": "assistant", "content": ""}, {"role": "user", "content": "   "}]},
    {"name": "null_and_missing_content", "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": None},
        {"role": "assistant"}, {"role": "user", "content": "again"}]},
    {"name": "unicode_and_emoji", "messages": [
        {"role": "system", "content": "Réponds en français. 日本語も大丈夫。"},
        {"role": "user", "content": "Emoji test 😀👍🏽 — ‘quotes’ \u2028 line sep, tab\tand NBSP\u00a0."},
        {"role": "assistant", "content": "D’accord ✅", "reasoning_content": "Ünïcödé réasoning 🤔"},
        {"role": "user", "content": "\u3000Ideographic space trimmed?\u3000"}]},
    {"name": "whitespace_trimming", "messages": [
        {"role": "system", "content": "\n\n  sys  \n"}, {"role": "user", "content": "\t question \n\n"},
        {"role": "assistant", "content": "\n answer \n", "reasoning_content": "\n\n  why  \n\n"},
        {"role": "user", "content": " next "}]},
    {"name": "assistant_last_prefill", "add_generation_prompt": False, "messages": [
        U1, {"role": "assistant", "content": "The capital is", "reasoning_content": "partial"}]},
    {"name": "long_history", "messages": [SYS] + [
        m for i in range(8) for m in (
            {"role": "user", "content": f"Question {i}: what is {i} + {i}?"},
            {"role": "assistant", "content": f"{2 * i}", "reasoning_content": f"Add {i} and {i}."})
    ] + [{"role": "user", "content": "Done?"}]},
    {"name": "extra_kwargs_ignored", "kwargs": {"custom_flag": True, "bos_token": "<s>"}, "messages": [U1]},
    # Conversations the templates reject: both sides must raise.
    {"name": "error_no_messages", "messages": []},
    {"name": "error_system_not_first", "messages": [U1, SYS, U2]},
    {"name": "error_no_user_query", "messages": [SYS, {"role": "assistant", "content": "Hello"}]},
    {"name": "error_only_tool_responses", "messages": [
        {"role": "user", "content": "<tool_response>\nx\n</tool_response>"}]},
    {"name": "error_unknown_role", "messages": [U1, {"role": "narrator", "content": "Meanwhile..."}]},
    {"name": "error_image_in_system", "messages": [
        {"role": "system", "content": [{"type": "image", "image": "x.png"}]}, U1]},
    {"name": "error_unexpected_item_type", "messages": [
        {"role": "user", "content": [{"type": "audio", "audio": "x.wav"}]}]},
    {"name": "error_content_is_number", "messages": [{"role": "user", "content": 42}]},
    {"name": "error_content_is_object", "messages": [{"role": "user", "content": {"text": "hi"}}]},
]

# Building blocks for the random mixes.
USER_TEXTS = ["Hi", "Explain recursion briefly.", "¿Qué tal?", "多谢！", "Line one\nLine two",
              "  spaced  ", "Use <b>tags</b> & \"quotes\"", "emoji 🎉", ""]
ASSISTANT_TEXTS = ["Sure.", "Here you go:\n- a\n- b", "<think>\nhidden\n</think>\n\nVisible.",
                   "Done ✅", "", "  padded  "]
REASONING = ["Think step by step.", "", "  spaces  ", "多步推理", None]


def random_conversation(rnd, idx):
    msgs = []
    if rnd.random() < 0.5:
        msgs.append({"role": rnd.choice(["system", "system", "developer"]),
                     "content": rnd.choice(["You are terse.", "Be kind. 🙂", "", [{"type": "text", "text": "Parts sys."}]])})
    with_tools = rnd.random() < 0.5
    n_turns = rnd.randint(1, 4)
    for t in range(n_turns):
        text = rnd.choice(USER_TEXTS)
        msgs.append({"role": "user", "content": [{"type": "text", "text": text}] if rnd.random() < 0.2 else text})
        if t == n_turns - 1 and rnd.random() < 0.6:
            break
        a = {"role": "assistant", "content": rnd.choice(ASSISTANT_TEXTS)}
        r = rnd.choice(REASONING)
        if r is not None:
            a["reasoning_content"] = r
        if with_tools and rnd.random() < 0.6:
            calls = []
            for k in range(rnd.randint(1, 3)):
                args = {"city": rnd.choice(["Paris", "Zürich", "東京"]), "days": rnd.randint(0, 7)}
                if rnd.random() < 0.5:
                    args["metric"] = rnd.choice([True, False, None])
                if rnd.random() < 0.3:
                    args["extra"] = rnd.choice([[1, "two"], {"k": 0.25}, 3.0, "x\ny"])
                calls.append(call("get_weather", json.dumps(args, ensure_ascii=rnd.random() < 0.5)
                                  if rnd.random() < 0.4 else args, f"c{t}{k}", wrap=rnd.random() < 0.85))
            a["tool_calls"] = calls
            if rnd.random() < 0.5:
                a["content"] = None
            msgs.append(a)
            for c in calls:
                msgs.append(tool(rnd.choice(['{"ok": true}', "Résultat : 21 °C", "", "line1\nline2"]),
                                 c.get("id", "x")))
            if rnd.random() < 0.5:
                msgs.append({"role": "assistant", "content": rnd.choice(ASSISTANT_TEXTS),
                             "reasoning_content": rnd.choice(["summary", ""])})
        else:
            msgs.append(a)
    conv = {"name": f"random_{idx:02d}", "messages": msgs}
    if with_tools:
        conv["tools"] = rnd.choice([[WEATHER], TOOLS, [SEARCH, WEATHER, NOARGS]])
    if rnd.random() < 0.3:
        conv["add_generation_prompt"] = False
    if rnd.random() < 0.4:
        conv["enable_thinking"] = rnd.choice([True, False])
    if rnd.random() < 0.3:
        conv["preserve_thinking"] = rnd.choice([True, False])
    return conv


def main():
    rnd = random.Random(20261129)
    convs = HAND + [random_conversation(rnd, i) for i in range(40)]
    names = [c["name"] for c in convs]
    assert len(names) == len(set(names)), "duplicate conversation names"
    with open(HERE / "conversations.json", "w", encoding="utf-8") as f:
        json.dump(convs, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote conversations.json: {len(convs)} conversations ({len(HAND)} hand-written)")


if __name__ == "__main__":
    main()
