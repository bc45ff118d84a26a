"""Drives `hearth serve`'s /v1/messages with the official `anthropic` client: a plain answer,
system and stop sequences, streaming (raw events and the SDK's accumulator), tool use whole and
streamed with its tool_result round trip, count_tokens, and errors in Anthropic's shape.
Usage: anthropic_client.py BASE_URL API_KEY"""

import json
import sys

import anthropic

base_url, api_key = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=300)
MODEL = "local"
# The 2026 client has no sampling parameters (the API fixes them); the server still takes them.
GREEDY = {"temperature": 0}
checks = 0

WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"],
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
CAPITAL = [{"role": "user", "content": "What is the capital of France? One word."}]


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


# A plain answer.
r = client.messages.create(model=MODEL, max_tokens=16, messages=CAPITAL, extra_body=GREEDY)
check(r.type == "message" and r.role == "assistant" and r.id.startswith("msg_"), r)
check(r.content and r.content[0].type == "text", r.content)
plain = r.content[0].text
check("Paris" in plain, f"plain answer: {plain!r}")
check(r.stop_reason == "end_turn", r.stop_reason)
check(r.usage.input_tokens > 0 and r.usage.output_tokens > 0, r.usage)
prompt_tokens = r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0)

# count_tokens: the prompt as the model sees it.
n = client.messages.count_tokens(model=MODEL, messages=CAPITAL)
check(n.input_tokens == prompt_tokens, (n, r.usage))

# A system prompt and a stop sequence: the answer stops before it, and says which.
r = client.messages.create(
    model=MODEL, max_tokens=16, system="You answer geography questions.", messages=CAPITAL,
    extra_body=GREEDY, stop_sequences=["Paris"],
)
check(r.stop_reason == "stop_sequence" and r.stop_sequence == "Paris", (r.stop_reason, r.stop_sequence))
check(all("Paris" not in b.text for b in r.content if b.type == "text"), r.content)

# Streamed, raw: Anthropic's event sequence.
events = list(client.messages.create(model=MODEL, max_tokens=16, messages=CAPITAL, extra_body=GREEDY, stream=True))
kinds = [e.type for e in events]
check(kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"], kinds)
check(kinds.count("content_block_start") == kinds.count("content_block_stop") >= 1, kinds)
text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
check(text == plain, f"streamed {text!r} != {plain!r}")
check(events[0].message.usage.input_tokens == prompt_tokens, events[0])
check(events[-2].delta.stop_reason == "end_turn" and events[-2].usage.output_tokens > 0, events[-2])

# Streamed through the SDK's accumulator.
with client.messages.stream(model=MODEL, max_tokens=16, messages=CAPITAL, extra_body=GREEDY) as stream:
    streamed = "".join(stream.text_stream)
    final = stream.get_final_message()
check(streamed == plain and final.content[0].text == plain, (streamed, final))

# Tool use, whole: the model calls it by itself.
r = client.messages.create(model=MODEL, max_tokens=64, messages=ASK, tools=[WEATHER], extra_body=GREEDY)
uses = [b for b in r.content if b.type == "tool_use"]
check(r.stop_reason == "tool_use" and uses, (r.stop_reason, r.content))
check(uses[0].name == "get_weather" and uses[0].id.startswith("toolu_"), uses[0])
check("paris" in str(uses[0].input.get("city", "")).lower(), uses[0].input)

# The result sent back: the model answers with it.
follow = client.messages.create(
    model=MODEL, max_tokens=48, tools=[WEATHER], tool_choice={"type": "none"}, extra_body=GREEDY,
    messages=ASK + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "18 C, sunny"}]},
    ],
)
answer = "".join(b.text for b in follow.content if b.type == "text")
check(follow.stop_reason == "end_turn" and "18" in answer, follow.content)

# Tool use streamed: input_json_delta pieces the SDK assembles into the input.
with client.messages.stream(
    model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hello!"}], tools=[WEATHER],
    tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY,
) as stream:
    final = stream.get_final_message()
uses = [b for b in final.content if b.type == "tool_use"]
check(final.stop_reason == "tool_use" and uses and isinstance(uses[0].input.get("city"), str), final)

# A JSON schema (output_config.format): the answer parses and fits.
schema = {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"], "additionalProperties": False}
r = client.messages.create(
    model=MODEL, max_tokens=48, messages=CAPITAL, extra_body=GREEDY,
    output_config={"format": {"type": "json_schema", "schema": schema}},
)
check(isinstance(json.loads(r.content[0].text)["capital"], str), r.content)

# tool_choice any with parallel use disabled: exactly one call.
r = client.messages.create(
    model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hi"}], tools=[WEATHER],
    tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body=GREEDY,
)
check(r.stop_reason == "tool_use" and len([b for b in r.content if b.type == "tool_use"]) == 1, r.content)

# What Claude Code sends: system-role messages among the turns, a server tool (left out),
# adaptive thinking, effort, context management, cache_control, metadata, the beta query.
r = client.beta.messages.create(
    model=MODEL, max_tokens=16, extra_body=GREEDY, thinking={"type": "adaptive"},
    system=[{"type": "text", "text": "Answer in one word.", "cache_control": {"type": "ephemeral"}}],
    messages=CAPITAL + [{"role": "system", "content": "Never explain."}],
    tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}],
    output_config={"effort": "high"}, metadata={"user_id": "u"},
    context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    betas=["context-management-2025-06-27"],
)
check(r.stop_reason in ("end_turn", "max_tokens") and r.content, r)

# Bad requests: Anthropic's error shape and the client's exception classes.
for bad in [
    dict(messages=[{"role": "system", "content": "x"}]),
    dict(messages=[]),
    dict(messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]),
    dict(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "4"}]}]),
    dict(messages=ASK, tools=[WEATHER], tool_choice={"type": "tool", "name": "nope"}),
]:
    try:
        client.messages.create(model=MODEL, max_tokens=4, **bad)
        check(False, f"accepted {bad}")
    except anthropic.BadRequestError as e:
        check(e.status_code == 400 and e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error", e.body)
try:
    anthropic.Anthropic(base_url=base_url, api_key="wrong", max_retries=0).messages.create(
        model=MODEL, max_tokens=4, messages=CAPITAL)
    check(False, "a wrong key was accepted")
except anthropic.AuthenticationError as e:
    check(e.status_code == 401 and e.body["error"]["type"] == "authentication_error", e.body)

print(f"anthropic {anthropic.__version__}: {checks} checks passed")
