#!/usr/bin/env python3
"""Opens N streamed requests through the gateway at once and reads its memory while they are
all open.

  streams.py GATEWAY_HOST:PORT BODY_FILE N GATEWAY_PID

Each request gets its own connection; once every stream has delivered its first SSE event,
the gateway's VmRSS and VmHWM (and RssFile and RssAnon, the two parts of VmRSS) are read
from /proc, and the connections are closed (the gateway cancels the upstream streams).
Prints one JSON object. Standard library only.
"""

import asyncio
import json
import sys


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


async def main(addr, body_file, count, pid):
    host, _, port = addr.rpartition(":")
    body = open(body_file, "rb").read()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\n"
        "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    rss_before = status_kb(pid, "VmRSS")
    opened = []
    await asyncio.wait_for(
        asyncio.gather(*(open_stream(host, int(port), head + body, opened) for _ in range(count))),
        timeout=120,
    )
    result = {
        "streams": len(opened),
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
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
