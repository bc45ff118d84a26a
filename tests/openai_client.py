"""Drives `hearth serve` with the official `openai` client: a plain answer, streaming, tool
calls (whole and streamed, checked the way llama.cpp's server tests check chunks),
tool_choice, usage, and bad requests. Usage: openai_client.py BASE_URL API_KEY"""

import json
import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=300)
model = client.models.list().data[0].id

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


# A plain answer.
r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is the capital of France? One word."}],
    temperature=0,
    max_tokens=16,
)
plain = r.choices[0].message.content
check(r.object == "chat.completion", r.object)
check("Paris" in plain, f"plain answer: {plain!r}")
check(r.usage.completion_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage)
check(r.usage.prompt_tokens_details.cached_tokens is not None, r.usage)
check(r.choices[0].finish_reason == "stop", r.choices[0].finish_reason)

# The same, streamed: the same text, usage in a last chunk without choices.
chunks = list(
    client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the capital of France? One word."}],
        temperature=0,
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
check(text == plain, f"streamed {text!r} != {plain!r}")
for c in chunks[:-1]:
    check(len(c.choices) == 1, f"one choice per chunk: {c}")
check(chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens, chunks[-1])


def check_call(call, name):
    check(call.type == "function" and call.id, call)
    check(call.function.name == name, call)
    args = json.loads(call.function.arguments)
    check(isinstance(args, dict), args)
    return args


# A tool call, whole: the model calls it by itself.
r = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER], temperature=0, max_tokens=64)
msg = r.choices[0].message
check(r.choices[0].finish_reason == "tool_calls", (r.choices[0].finish_reason, msg))
args = check_call(msg.tool_calls[0], "get_weather")
check("paris" in str(args.get("city", "")).lower(), args)

# The result sent back (no more calls allowed): the model answers with it.
follow = client.chat.completions.create(
    model=model,
    messages=ASK
    + [msg.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "18 C, sunny"}],
    tools=[WEATHER],
    tool_choice="none",
    temperature=0,
    max_tokens=48,
)
check(follow.choices[0].message.content and "18" in follow.choices[0].message.content, follow.choices[0].message)

# Streamed tool call: llama.cpp's checks.
stream = client.chat.completions.create(
    model=model, messages=ASK, tools=[WEATHER], temperature=0, max_tokens=64, stream=True
)
calls, finish = {}, None
for c in stream:
    check(len(c.choices) == 1, c)
    ch = c.choices[0]
    for tc in ch.delta.tool_calls or []:
        if tc.index not in calls:
            # The first delta of a call carries its id, type and name.
            check(tc.id and tc.type == "function" and tc.function.name, tc)
            calls[tc.index] = {"name": tc.function.name, "arguments": ""}
        calls[tc.index]["arguments"] += tc.function.arguments or ""
    finish = ch.finish_reason or finish
check(finish == "tool_calls" and len(calls) >= 1, (finish, calls))
check(calls[0]["name"] == "get_weather" and isinstance(json.loads(calls[0]["arguments"]), dict), calls)

# tool_choice: required (a question that needs no tool still gets a call), a named tool,
# none (no call).
r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Add 2 and 3."}],
    tools=[WEATHER, ADD],
    tool_choice="required",
    parallel_tool_calls=False,
    temperature=0,
    max_tokens=64,
)
check(len(r.choices[0].message.tool_calls or []) == 1 and r.choices[0].finish_reason == "tool_calls", r.choices[0])
check_call(r.choices[0].message.tool_calls[0], r.choices[0].message.tool_calls[0].function.name)
# required with parallel calls allowed, greedy: the set of calls ends the turn (a small model
# otherwise writes the same call until max_tokens), and no cut call reaches content.
CALC = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression exactly.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}
r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is 1234 * 5678?"}],
    tools=[CALC],
    tool_choice="required",
    temperature=0,
    max_tokens=200,
)
m = r.choices[0].message
seen = [(c.function.name, c.function.arguments) for c in (m.tool_calls or [])]
check(r.choices[0].finish_reason == "tool_calls" and seen and len(set(seen)) == len(seen), r.choices[0])
check(not m.content or "<tool_call>" not in m.content, m)
r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Hello!"}],
    tools=[WEATHER, ADD],
    tool_choice={"type": "function", "function": {"name": "add"}},
    temperature=0,
    max_tokens=64,
)
check_call(r.choices[0].message.tool_calls[0], "add")
r = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=32)
check(not r.choices[0].message.tool_calls and r.choices[0].message.content, r.choices[0].message)

# Raw completions.
r = client.completions.create(model=model, prompt="def fib(n):", max_tokens=8, temperature=0)
check(r.choices[0].text and r.usage.completion_tokens == 8, r)

# Bad requests: the client raises the right errors.
for bad, kind in [
    (dict(messages=[{"role": "wizard", "content": "x"}]), openai.BadRequestError),
    (dict(messages=[]), openai.BadRequestError),
    (dict(messages=ASK, n=2), openai.BadRequestError),
    (dict(messages=ASK, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}), openai.BadRequestError),
]:
    try:
        client.chat.completions.create(model=model, max_tokens=4, **bad)
        check(False, f"accepted {bad}")
    except kind as e:
        check(e.status_code == 400 and e.body and e.body.get("message"), e)
try:
    openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
    check(False, "a wrong key was accepted")
except openai.AuthenticationError as e:
    check(e.status_code == 401, e)

print(f"openai {openai.__version__}: {checks} checks passed against {model}")
