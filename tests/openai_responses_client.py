"""Drives `hearth serve`'s /v1/responses with the official `openai` client: a plain answer,
instructions and input items, streaming (raw events and the SDK's accumulator), function calls
whole and streamed with their function_call_output round trip, a JSON schema, an incomplete
answer, and errors. Usage: openai_responses_client.py BASE_URL API_KEY"""

import json
import re
import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=300)
MODEL = "local"
checks = 0

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"],
    },
}
CAPITAL = "What is the capital of France? One word."
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


# A plain answer.
r = client.responses.create(model=MODEL, input=CAPITAL, temperature=0, max_output_tokens=16)
check(r.object == "response" and r.status == "completed" and r.id.startswith("resp_"), r)
plain = r.output_text
check("Paris" in plain, f"plain answer: {plain!r}")
check(r.usage.input_tokens > 0 and r.usage.output_tokens > 0, r.usage)
check(r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, r.usage)

# Instructions and message items.
r = client.responses.create(
    model=MODEL, instructions="You answer geography questions.", temperature=0, max_output_tokens=16,
    input=[{"role": "user", "content": [{"type": "input_text", "text": CAPITAL}]}],
)
check("Paris" in r.output_text, r.output_text)

# Streamed, raw: the event sequence, numbered.
events = list(client.responses.create(model=MODEL, input=CAPITAL, temperature=0, max_output_tokens=16, stream=True))
kinds = [e.type for e in events]
check(kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed", kinds)
check([e.sequence_number for e in events] == list(range(len(events))), "sequence numbers")
text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
check(text == plain and events[-1].response.output_text == plain, (text, plain))

# Streamed through the SDK's accumulator (which checks every item's identity).
with client.responses.stream(model=MODEL, input=CAPITAL, temperature=0, max_output_tokens=16) as stream:
    deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    final = stream.get_final_response()
check(deltas == plain and final.output_text == plain, (deltas, final.output_text))

# A function call, whole: the model calls it by itself.
r = client.responses.create(model=MODEL, input=ASK, tools=[WEATHER], temperature=0, max_output_tokens=64)
calls = [o for o in r.output if o.type == "function_call"]
check(calls and calls[0].name == "get_weather" and calls[0].call_id, r.output)
args = json.loads(calls[0].arguments)
check("paris" in str(args.get("city", "")).lower(), args)

# The output sent back with the call's output: the model answers with it.
follow = client.responses.create(
    model=MODEL, tools=[WEATHER], tool_choice="none", temperature=0, max_output_tokens=48,
    input=ASK + [o.model_dump(exclude_none=True) for o in r.output]
    + [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "18 C, sunny"}],
)
check("18" in follow.output_text, follow.output_text)

# A forced call, streamed: arguments deltas, assembled by the SDK.
with client.responses.stream(
    model=MODEL, input="Hello!", tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
    temperature=0, max_output_tokens=64,
) as stream:
    final = stream.get_final_response()
calls = [o for o in final.output if o.type == "function_call"]
check(calls and isinstance(json.loads(calls[0].arguments).get("city"), str), final.output)

# A JSON schema: the answer parses and fits.
schema = {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"], "additionalProperties": False}
r = client.responses.create(
    model=MODEL, input=CAPITAL, temperature=0, max_output_tokens=48,
    text={"format": {"type": "json_schema", "name": "capital", "schema": schema, "strict": True}},
)
check(isinstance(json.loads(r.output_text)["capital"], str), r.output_text)

# Cut off by max_output_tokens: incomplete, and says why.
r = client.responses.create(model=MODEL, input="Write a long story about a dragon.", max_output_tokens=3, temperature=0)
check(r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", (r.status, r.incomplete_details))

# What Codex sends: developer input, a hosted tool (left out), a namespace of functions,
# `store: false` with the reasoning asked back encrypted. A forced call of the namespace's
# function comes back under its own name with its namespace; a custom tool's call as text.
r = client.responses.create(
    model=MODEL, max_output_tokens=64, temperature=0, store=False,
    include=["reasoning.encrypted_content"], prompt_cache_key="k",
    input=[{"role": "developer", "content": "Use the tools."}] + ASK,
    tools=[{"type": "web_search"}, {"type": "namespace", "name": "weather_ns",
                                    "description": "Weather tools", "tools": [WEATHER]}],
    tool_choice={"type": "function", "name": "get_weather", "namespace": "weather_ns"},
)
calls = [o for o in r.output if o.type == "function_call"]
check(len(calls) >= 1 and calls[0].name == "get_weather"
      and getattr(calls[0], "namespace", None) == "weather_ns", r.output)
patch = {"type": "custom", "name": "apply_patch", "description": "Apply a patch to files."}
r = client.responses.create(
    model=MODEL, max_output_tokens=48, temperature=0, input="Patch the files.", tools=[patch],
    tool_choice={"type": "custom", "name": "apply_patch"},
)
custom = [o for o in r.output if o.type == "custom_tool_call"]
check(len(custom) == 1 and custom[0].name == "apply_patch" and isinstance(custom[0].input, str), r.output)
# A custom tool with a Lark grammar: its input is decoded under the grammar.
count = {"type": "custom", "name": "count", "description": "Say how many.",
         "format": {"type": "grammar", "syntax": "lark",
                    "definition": 'start: "none" | NUM " \\"apples\\""\nNUM: /[1-9][0-9]?/\n'}}
r = client.responses.create(
    model=MODEL, max_output_tokens=48, temperature=0, input="How many apples?", tools=[count],
    tool_choice={"type": "custom", "name": "count"},
)
custom = [o for o in r.output if o.type == "custom_tool_call"]
check(len(custom) == 1 and re.fullmatch(r'none|[1-9][0-9]? "apples"', custom[0].input), r.output)

# Bad requests.
for bad, param in [
    (dict(input=CAPITAL, previous_response_id="resp_123"), "previous_response_id"),
    (dict(input=[{"type": "function_call_output", "call_id": "call_x", "output": "4"}]), "input[0].call_id"),
    (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]), "input[0].content[0].image_url"),
    (dict(input=CAPITAL, tools=[{"type": "namespace", "name": "weather_ns"}]), "tools[0].tools"),
]:
    try:
        client.responses.create(model=MODEL, max_output_tokens=4, **bad)
        check(False, f"accepted {bad}")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body.get("param") == param, e.body)

print(f"openai {openai.__version__} responses: {checks} checks passed")
