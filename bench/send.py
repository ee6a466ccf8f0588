#!/usr/bin/env python3
"""Sends N POSTs of one body over one keep-alive connection, one at a time, and checks each.

  send.py URL BODY_FILE N [--stream]

Every answer must be a 200; a stream must end in `data: [DONE]`. Prints the number of SSE
events seen (0 for JSON answers). Standard library only.
"""

import http.client
import sys
import urllib.parse


def main(url, body_file, count, stream):
    parts = urllib.parse.urlsplit(url)
    body = open(body_file, "rb").read()
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    headers = {"Content-Type": "application/json"}
    events = 0
    for _ in range(count):
        conn.request("POST", parts.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            sys.exit(f"{url}: status {resp.status}: {data[:300]!r}")
        if stream:
            if not data.rstrip().endswith(b"data: [DONE]"):
                sys.exit(f"{url}: stream did not end in [DONE]: {data[-300:]!r}")
            events += data.count(b"\ndata:") + data.startswith(b"data:")
    print(events)


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    main(args[0], args[1], int(args[2]), "--stream" in args[3:])
