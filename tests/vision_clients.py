"""The official `openai` and `anthropic` clients send an image through `hearth serve` (the
tiny Qwen3.5 with a vision tower): chat completions with an `image_url` data URI, Responses with
`input_image`, Messages with an `image` block; the three give the same answer, and the prompt
holds the image's 35 tokens.

    python tests/vision_clients.py http://127.0.0.1:PORT IMAGE.png
"""
import base64
import sys

import anthropic
import openai

base, image = sys.argv[1], sys.argv[2]
b64 = base64.b64encode(open(image, "rb").read()).decode()
uri = f"data:image/png;base64,{b64}"
checks = 0


def check(ok, what):
    global checks
    if not ok:
        raise SystemExit(f"check failed: {what}")
    checks += 1


oa = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
r = oa.chat.completions.create(
    model="tiny", max_tokens=8, temperature=0,
    messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}},
                                           {"type": "text", "text": "What is this?"}]}],
)
check(r.usage.prompt_tokens == 57, r.usage)
m = r.choices[0].message
chat = (getattr(m, "reasoning_content", None) or "") + (m.content or "")
check(len(chat) > 0, r)

r = oa.responses.create(
    model="tiny", max_output_tokens=8, temperature=0,
    input=[{"role": "user", "content": [{"type": "input_image", "image_url": uri},
                                        {"type": "input_text", "text": "What is this?"}]}],
)
check(r.usage.input_tokens == 57, r.usage)
check(r.usage.input_tokens_details.cached_tokens > 39, r.usage)

an = anthropic.Anthropic(base_url=base, api_key="none", max_retries=0)
r = an.messages.create(
    model="tiny", max_tokens=8, extra_body={"temperature": 0},
    messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
        {"type": "text", "text": "What is this?"}]}],
)
# Anthropic counts the prompt found cached apart: the same image, known by its pixels.
check(r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0) == 57, r.usage)
check((r.usage.cache_read_input_tokens or 0) > 39, r.usage)
text = "".join(getattr(b, "thinking", "") or getattr(b, "text", "") for b in r.content)
check(text.strip() == chat.strip(), (text, chat))

# A bad image: the client's 400, naming the part.
try:
    oa.chat.completions.create(
        model="tiny", max_tokens=4,
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}],
    )
    check(False, "a bad image was accepted")
except openai.BadRequestError as e:
    check(e.status_code == 400 and e.body.get("param") == "messages[0].content[0].image_url", e.body)

print(f"openai {openai.__version__}, anthropic {anthropic.__version__}: {checks} image checks passed")
