#!/usr/bin/env python3
"""Start to first answer: launches the gateway, sends one chat request as soon as its port
accepts, and measures from launch to that request's 200. Repeats, stopping the gateway each
time; the first run starts on an empty store (its migrations are in the figure).

  startup.py BIN CONFIG PORT BODY_FILE RUNS STORE_FILE

Prints one JSON object: every run's milliseconds, the first (empty store) and the median of
the rest. The environment is passed to the gateway (SWITCHYARD_MASTER_KEY and so on).
Standard library only.
"""

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def first_answer(port, body, process, limit=30.0):
    """Polls until the gateway answers the request with a 200; returns when it did."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the gateway exited with {process.returncode} before answering")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("POST", "/v1/chat/completions", body=body,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
        except (ConnectionRefusedError, ConnectionResetError, socket.timeout,
                http.client.RemoteDisconnected):
            time.sleep(0.001)
            continue
        if resp.status != 200:
            sys.exit(f"first answer was {resp.status}: {data[:300]!r}")
        return time.monotonic()
    sys.exit(f"no answer within {limit} s")


def main(binary, config, port, body_file, runs, store_file):
    body = open(body_file, "rb").read()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(store_file + suffix):
            os.remove(store_file + suffix)
    times = []
    for _ in range(runs):
        started = time.monotonic()
        process = subprocess.Popen([binary, "serve", "--config", config],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            answered = first_answer(port, body, process)
        finally:
            process.terminate()
            process.wait(timeout=30)
        times.append((answered - started) * 1e3)
    rest = times[1:] or times
    print(json.dumps({
        "runs_ms": [round(t, 1) for t in times],
        "empty_store_ms": round(times[0], 1),
        "median_ms": round(statistics.median(rest), 1),
    }))


if __name__ == "__main__":
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]),
         sys.argv[6])
