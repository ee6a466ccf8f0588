#!/usr/bin/env python3
"""What one more hop costs on this machine: a loopback TCP round trip between two processes.

Standard library only (Linux). A proxy puts one such round trip (itself to the upstream and
back) inside every request its client makes, so the latency it adds at concurrency 1 can be
no lower than this, whatever the proxy does. The figure depends on where the scheduler puts
the two processes: on one CPU, a wake-up is a switch; on two, the sleeping CPU must be woken,
which on some virtual machines costs tens of microseconds. Both are measured, pinned with
sched_setaffinity, and the unpinned case is what the load phases meet.

  hops.py [-n ROUND_TRIPS]

Prints one JSON object: median, p90 and minimum round trip in µs for "unpinned",
"one_cpu" and (with two or more CPUs) "two_cpus". Python's own cost is in each figure
(a few µs: compare "one_cpu" with a C program's 5 µs).
"""

import argparse
import json
import os
import socket
import sys
import time

WARMUP = 200


def echo(listener, cpu):
    """The child: answers every byte it gets, until the parent closes."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while conn.recv(64):
        conn.sendall(b"x")


def round_trips(n, cpus):
    """Median, p90 and minimum of `n` round trips, the two processes on `cpus` if given."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    address = listener.getsockname()
    pid = os.fork()
    if pid == 0:
        try:
            echo(listener, cpus[1] if cpus else None)
        finally:
            os._exit(0)
    listener.close()
    allowed = os.sched_getaffinity(0)
    try:
        if cpus:
            os.sched_setaffinity(0, {cpus[0]})
        with socket.create_connection(address, timeout=10) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            samples = []
            for i in range(WARMUP + n):
                start = time.perf_counter_ns()
                sock.sendall(b"x")
                if not sock.recv(64):
                    raise RuntimeError("the echo process closed")
                if i >= WARMUP:
                    samples.append((time.perf_counter_ns() - start) / 1000)
    finally:
        os.sched_setaffinity(0, allowed)
        # The echo ends when the connection closes; if it was never made, it waits in
        # accept, so it is told to end.
        os.kill(pid, 15)
        os.waitpid(pid, 0)
    samples.sort()
    return {
        "median_us": round(samples[len(samples) // 2], 1),
        "p90_us": round(samples[int(len(samples) * 0.9)], 1),
        "min_us": round(samples[0], 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000, help="measured round trips per case")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    result = {"n": args.n, "unpinned": round_trips(args.n, None)}
    result["one_cpu"] = round_trips(args.n, (cpus[0], cpus[0]))
    if len(cpus) > 1:
        result["two_cpus"] = round_trips(args.n, (cpus[0], cpus[1]))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
