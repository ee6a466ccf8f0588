#!/usr/bin/env python3
"""Opens N streamed requests through the gateway at once and reads its memory while they are
all open.

  streams.py GATEWAY_HOST:PORT BODY_FILE N GATEWAY_PID [WAVE]

With WAVE below N they are opened WAVE at a time, each wave once the last has its first
events: what the open streams hold without the burst's peak (when all N arrive at once,
every handler is live at the same moment, and malloc keeps much of that peak, by an amount
that varies from run to run). The fake's streams last about 20 s, so the waves must be done
well within that: a warning says when opening took more than 15 s.

Each request gets its own connection; once every stream has delivered its first SSE event,
the gateway's VmRSS and VmHWM (and RssFile and RssAnon, the two parts of VmRSS) are read
from /proc, and the connections are closed (the gateway cancels the upstream streams).
Prints one JSON object. Standard library only.
"""

import asyncio
import json
import sys
import time

# The fake's slow streams last about 20 s; opening must end well before the first of them do.
OPENING_WARN_S = 15


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} for pid {pid}")


async def open_stream(host, port, payload, opened):
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(payload)
    await writer.drain()
    seen = b""
    while b"data:" not in seen:
        chunk = await reader.read(4096)
        if not chunk:
            raise RuntimeError(f"stream closed before its first event: {seen[:300]!r}")
        seen += chunk
    if not seen.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"not a 200: {seen[:300]!r}")
    opened.append(writer)


async def main(addr, body_file, count, pid, wave):
    host, _, port = addr.rpartition(":")
    body = open(body_file, "rb").read()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\n"
        "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    rss_before = status_kb(pid, "VmRSS")
    opened = []
    started = time.monotonic()
    for first in range(0, count, wave):
        size = min(wave, count - first)
        await asyncio.wait_for(
            asyncio.gather(*(open_stream(host, int(port), head + body, opened) for _ in range(size))),
            timeout=120,
        )
    opening_s = time.monotonic() - started
    if opening_s > OPENING_WARN_S:
        print(f"streams.py: opening took {opening_s:.1f} s; the first streams may have ended", file=sys.stderr)
    result = {
        "streams": len(opened),
        "wave": wave,
        "opening_s": round(opening_s, 2),
        "rss_before_kb": rss_before,
        "rss_kb": status_kb(pid, "VmRSS"),
        "hwm_kb": status_kb(pid, "VmHWM"),
        # VmRSS is these two (and shared memory, none here): the binary's code pages the
        # process has touched, which no heap work moves, and everything it allocated.
        "rss_file_kb": status_kb(pid, "RssFile"),
        "rss_anon_kb": status_kb(pid, "RssAnon"),
    }
    for writer in opened:
        writer.close()
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    count = int(sys.argv[3])
    wave = int(sys.argv[5]) if len(sys.argv) == 6 else count
    if wave < 1:
        sys.exit("WAVE must be at least 1")
    asyncio.run(main(sys.argv[1], sys.argv[2], count, int(sys.argv[4]), wave))
