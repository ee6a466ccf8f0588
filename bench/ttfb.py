#!/usr/bin/env python3
"""Streaming time-to-first-byte, straight to the fake provider and through the gateway.

Standard library only. For each of N rounds it makes one streamed request to the fake and
one to the gateway (interleaved, so drift on the machine hits both alike), sequentially
(concurrency 1). Each request:

  1. opens a fresh TCP connection (TCP_NODELAY) to 127.0.0.1 — connect time is NOT timed;
  2. starts the clock just before `sendall` of the raw HTTP/1.1 request (`Connection: close`);
  3. records the time the first response byte arrives (TTFB: usually the status line), and
     the time the first byte of the first SSE event (`data:`) has arrived (first event);
  4. reads to EOF and checks the answer was a 200 ending in `data: [DONE]`.

It prints one JSON object: medians and p90 of both measures for each target, in µs.
"""

import argparse
import json
import socket
import statistics
import sys
import time


def parse_addr(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def request_bytes(addr, path, body):
    host, port = addr
    head = (
        f"POST {path} HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        "Content-Type: application/json\r\n"
        "Accept: text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n"
        "\r\n"
    )
    return head.encode() + body


def one(addr, payload, timeout):
    """Returns (ttfb_ns, first_event_ns) for one streamed request."""
    with socket.create_connection(addr, timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        first_byte = first_event = None
        start = time.perf_counter_ns()
        sock.sendall(payload)
        while True:
            chunk = sock.recv(65536)
            now = time.perf_counter_ns()
            if not chunk:
                break
            if first_byte is None:
                first_byte = now
            buf += chunk
            if first_event is None and b"data:" in buf:
                first_event = now
    if not buf.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"{addr}: not a 200: {bytes(buf[:200])!r}")
    if b"data: [DONE]" not in buf or first_event is None:
        raise RuntimeError(f"{addr}: stream did not end with [DONE]: {bytes(buf[-200:])!r}")
    return first_byte - start, first_event - start


def summarize(samples_ns):
    us = sorted(s / 1000 for s in samples_ns)
    return {
        "median_us": statistics.median(us),
        "p90_us": us[min(len(us) - 1, int(len(us) * 0.9))],
        "min_us": us[0],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--direct", required=True, help="fake provider HOST:PORT")
    parser.add_argument("--gateway", required=True, help="gateway HOST:PORT")
    parser.add_argument("--direct-path", default="/v1/chat/completions")
    parser.add_argument("--direct-model", default="m")
    parser.add_argument("--gateway-model", default="bench")
    parser.add_argument("-n", type=int, default=200, help="measured requests per target")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured requests per target")
    parser.add_argument("--timeout", type=float, default=10.0, help="socket timeout, seconds")
    args = parser.parse_args()

    targets = {
        "direct": (parse_addr(args.direct), args.direct_path, args.direct_model),
        "gateway": (parse_addr(args.gateway), "/v1/chat/completions", args.gateway_model),
    }
    payloads = {}
    for name, (addr, path, model) in targets.items():
        body = json.dumps(
            {"model": model, "stream": True, "messages": [{"role": "user", "content": "Hello"}]},
            separators=(",", ":"),
        ).encode()
        payloads[name] = (addr, request_bytes(addr, path, body))

    first_byte = {name: [] for name in targets}
    first_event = {name: [] for name in targets}
    for i in range(args.warmup + args.n):
        for name, (addr, payload) in payloads.items():
            fb, fe = one(addr, payload, args.timeout)
            if i >= args.warmup:
                first_byte[name].append(fb)
                first_event[name].append(fe)

    result = {"n": args.n, "warmup": args.warmup}
    for name in targets:
        result[name] = {
            "first_byte": summarize(first_byte[name]),
            "first_event": summarize(first_event[name]),
        }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
