#!/usr/bin/env python3
"""Request bodies and upstream answers for the benchmarks, as users send and receive them.

  bodies.py chat SIZE MODEL [--stream] [--escaped]
                                         a multi-turn chat completion body of about SIZE bytes
  bodies.py completion                   the upstream's whole answer (OpenAI completion)
  bodies.py sse EVENTS                   the upstream's stream: EVENTS content chunks, usage, [DONE]

SIZE takes a suffix: 64, 4k, 32k, 128k. The chat body is deterministic: a system prompt, then
alternating user and assistant turns of prose and code (quotes, newlines, non-ASCII), so the
JSON has the escapes and nesting a real conversation has. 64 is the one-line hello.

--escaped: the conversation in several languages (Chinese, Russian, Korean, accented Latin,
an emoji now and then), every non-ASCII character written as a \\u escape, as Python's
json.dumps does by default: SIZE is then the text before escaping (the body is about three
times that).
"""

import json
import sys

PROSE = (
    "Could you look at the retry loop below and tell me why the second attempt sometimes "
    "reuses the stale connection? I've added logging around the pool checkout \u2014 the "
    "\"idle\" count never drops below 2, which seems odd. "
)
CODE = (
    "```rust\nfor attempt in 0..max_attempts {\n    let conn = pool.checkout().await?;\n"
    "    match send(&conn, &request).await {\n        Ok(reply) => return Ok(reply),\n"
    "        Err(e) if e.is_retryable() => continue,\n        Err(e) => return Err(e),\n    }\n}\n```\n"
)
ANSWER = (
    "The checkout returns the connection that just failed because the pool marks it idle "
    "before the error is classified. Move `pool.discard(conn)` into the retryable arm, and "
    "consider a short jittered backoff (50\u2013200 ms) so both attempts don't hit the same "
    "overloaded upstream. Caf\u00e9-grade fix: also cap `max_attempts` at 3.\n"
)


# The escaped body's turns: text whose every character past ASCII becomes a \u escape, and
# an emoji (a surrogate pair) in one turn of four.
WORLD = (
    "Почему второй запрос иногда берёт устаревшее соединение? 为什么第二次尝试会复用失效的连接？"
    "연결 풀이 오류를 분류하기 전에 유휴 상태로 표시합니다. Voilà: déjà vu, naïve façade. "
)


def size(text):
    text = text.lower()
    factor = 1024 if text.endswith("k") else 1
    return int(text.rstrip("k")) * factor


def chat(target, model, stream, escaped=False):
    if escaped:
        return escaped_chat(target, model, stream)
    if target <= 64:
        body = {"model": model, "messages": [{"role": "user", "content": "Hello"}]}
    else:
        messages = [{"role": "system", "content": "You are a careful senior engineer. Answer briefly."}]
        body = {"model": model, "messages": messages, "temperature": 0.2, "max_tokens": 512}
        turn = 0
        while len(json.dumps(body, ensure_ascii=False).encode()) < target:
            if turn % 2 == 0:
                messages.append({"role": "user", "content": PROSE + (CODE if turn % 4 == 0 else "")})
            else:
                messages.append({"role": "assistant", "content": ANSWER})
            turn += 1
        if messages[-1]["role"] != "user":
            messages.append({"role": "user", "content": "Thanks. And the backoff?"})
    if stream:
        body["stream"] = True
    return json.dumps(body, ensure_ascii=False)


def escaped_chat(target, model, stream):
    messages = [{"role": "system", "content": "You are a careful senior engineer. Answer briefly."}]
    body = {"model": model, "messages": messages, "temperature": 0.2, "max_tokens": 512}
    turn = 0
    while len(json.dumps(body, ensure_ascii=False).encode()) < target:
        role = "user" if turn % 2 == 0 else "assistant"
        emoji = " \U0001F642" if turn % 4 == 0 else ""
        messages.append({"role": role, "content": WORLD + emoji})
        turn += 1
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": WORLD})
    if stream:
        body["stream"] = True
    return json.dumps(body, ensure_ascii=True)


def completion():
    return json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": ANSWER}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 80, "total_tokens": 1080},
    }, separators=(",", ":"))


def sse(events):
    def chunk(delta, finish=None, usage=None):
        c = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
             "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if usage is not None:
            c["choices"] = []
            c["usage"] = usage
        return "data: " + json.dumps(c, separators=(",", ":")) + "\n\n"
    out = [chunk({"role": "assistant", "content": ""})]
    words = ANSWER.split(" ")
    for i in range(events):
        out.append(chunk({"content": words[i % len(words)] + " "}))
    out.append(chunk({}, "stop"))
    out.append(chunk({}, usage={"prompt_tokens": 1000, "completion_tokens": events, "total_tokens": 1000 + events}))
    out.append("data: [DONE]\n\n")
    return "".join(out)


def main(args):
    if args[:1] == ["chat"] and len(args) >= 3:
        flags = args[3:]
        sys.stdout.write(chat(size(args[1]), args[2], "--stream" in flags, "--escaped" in flags))
    elif args == ["completion"]:
        sys.stdout.write(completion())
    elif args[:1] == ["sse"] and len(args) == 2:
        sys.stdout.write(sse(int(args[1])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
