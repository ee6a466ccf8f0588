#!/usr/bin/env python3
"""Formats the Switchyard benchmark's raw results (written by bench/run.sh) as tables.

Standard library only. Inputs:
  --results FILE   JSON lines, one per load phase:
                   {"scenario": "json 4k", "target": "direct"|"gateway"|"proxy", "conns": C,
                    "threads": T, "gateway_cpu_ticks": N, "gateway_user_ticks": N,
                    "gateway_sys_ticks": N, "proxy_user_ticks": N, "proxy_sys_ticks": N,
                    "fake_cpu_ticks": N (the upstream's), "machine_busy_ticks": N,
                    "wrk_cpu_ms": N, "wall_us": N, "wrk": {...}}
                   where "wrk" is the object bench/wrk.lua prints (latencies in µs) and
                   "proxy" is the reference proxy (nginx as a keep-alive reverse proxy).
  --ttfb FILE      the JSON bench/ttfb.py prints.
  --ttfb-proxy FILE  the same through the reference proxy (optional).
  --streams FILE   the JSON bench/streams.py prints.
  --startup FILE   the JSON bench/startup.py prints (optional).
  --hops FILE      the JSON bench/hops.py prints (optional): what one more hop costs here.
  --rss-kb / --hwm-kb   the gateway's VmRSS / VmHWM after the load phases, in kB.
  --clk-tck        clock ticks per second (`getconf CLK_TCK`).
  --events         content events per streamed answer in the stream scenario.
Optionally --json FILE writes the computed figures as JSON.

Targets are reported, never asserted: the exit status is 0 whether or not they are met.
"""

import argparse
import json
import sys

# Issue 15's targets, on a 2-core machine.
CPU_TARGETS_US = {"4k": 30.0, "32k": 40.0, "128k": 70.0}  # gateway CPU per request
ADDED_P50_US_C1 = 50.0  # added p50 at c=1, 4 KB body
ADDED_P99_US_C1 = 100.0  # added p99 at c=1, 4 KB body
RATIO_C64 = 0.40  # gateway req/s ÷ direct req/s at c=64, 4 KB body
TTFB_ADDED_US = 50.0  # stream: added time to first byte at c=1
CPU_PER_EVENT_US = 1.0  # stream: gateway CPU per forwarded event
STREAMS_RSS_MB = 40.0  # gateway RSS with 1,000 streams open
TARGET_STREAMS = 1000  # the stream count STREAMS_RSS_MB is defined at
STARTUP_MS = 50.0  # start to first answer

# Above this many CPUs of other work during a phase, the report warns that it is skewed.
OTHER_CPUS_WARN = 0.2


def load_phases(path, clk_tck):
    phases = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            row = json.loads(line)
            wrk = row["wrk"]
            # Only answered requests count: a gateway that refuses (a 503 is fast) must not
            # look faster or cheaper for it. wrk counts those answers in `requests` and in
            # `err_status`; socket errors are in neither.
            requests = wrk["requests"] - wrk["err_status"]
            seconds = wrk["duration_us"] / 1e6
            errors = sum(wrk[k] for k in wrk if k.startswith("err_"))
            tick_us = 1e6 / clk_tck

            def per_request(ticks):
                return ticks * tick_us / requests if requests else float("nan")

            # Split and proxy fields are absent from results written before they were added.
            proxy_ticks = row.get("proxy_user_ticks", 0) + row.get("proxy_sys_ticks", 0)
            phases[(row["scenario"], row["target"], row["conns"])] = {
                "requests": requests,
                "seconds": seconds,
                "rps": requests / seconds if seconds else 0.0,
                "p50_us": wrk["lat_p50_us"],
                "p90_us": wrk["lat_p90_us"],
                "p99_us": wrk["lat_p99_us"],
                "max_us": wrk["lat_max_us"],
                "errors": errors,
                "gateway_cpu_us_per_req": per_request(row["gateway_cpu_ticks"]),
                "gateway_user_us_per_req": per_request(row.get("gateway_user_ticks", 0)),
                "gateway_sys_us_per_req": per_request(row.get("gateway_sys_ticks", 0)),
                "proxy_cpu_us_per_req": per_request(proxy_ticks),
                "proxy_user_us_per_req": per_request(row.get("proxy_user_ticks", 0)),
                "proxy_sys_us_per_req": per_request(row.get("proxy_sys_ticks", 0)),
                "upstream_cpu_us_per_req": per_request(row["fake_cpu_ticks"]),
                "threads": row["threads"],
                # CPUs' worth of work by everything but the gateway, the reference proxy,
                # the upstream and wrk.
                "other_cpus": (
                    row["machine_busy_ticks"] / clk_tck
                    - (row["gateway_cpu_ticks"] + proxy_ticks + row["fake_cpu_ticks"]) / clk_tck
                    - row["wrk_cpu_ms"] / 1e3
                )
                / (row["wall_us"] / 1e6),
            }
    return phases


def reference_rows(phases, rows):
    """The reference proxy's figures beside the gateway's, where both ran."""
    out = {}
    for (scenario, c), r in rows.items():
        p = phases.get((scenario, "proxy", c))
        if not p:
            continue
        d, g = r["direct"], r["gateway"]
        out[(scenario, c)] = {
            "proxy": p,
            "gateway": g,
            "proxy_ratio": p["rps"] / d["rps"] if d["rps"] else float("nan"),
            "gateway_ratio": r["ratio"],
            "proxy_added_p50_us": p["p50_us"] - d["p50_us"],
            "gateway_added_p50_us": r["added_p50_us"],
        }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True)
    p.add_argument("--ttfb", required=True)
    p.add_argument("--streams", required=True)
    p.add_argument("--startup")
    p.add_argument("--hops")
    p.add_argument("--ttfb-proxy")
    p.add_argument("--rss-kb", type=int, required=True)
    p.add_argument("--hwm-kb", type=int, required=True)
    p.add_argument("--clk-tck", type=int, required=True)
    p.add_argument("--events", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--warmup", type=float, required=True)
    p.add_argument("--cpus", type=int, default=0)
    p.add_argument("--json")
    args = p.parse_args()

    phases = load_phases(args.results, args.clk_tck)
    with open(args.ttfb) as f:
        ttfb = json.load(f)
    with open(args.streams) as f:
        streams = json.load(f)
    startup = None
    if args.startup:
        with open(args.startup) as f:
            startup = json.load(f)
    hops = None
    if args.hops:
        with open(args.hops) as f:
            hops = json.load(f)
    ttfb_proxy = None
    if args.ttfb_proxy:
        with open(args.ttfb_proxy) as f:
            ttfb_proxy = json.load(f)
    scenarios = list(dict.fromkeys(s for (s, _, _) in phases))
    threads = sorted({ph["threads"] for ph in phases.values()})

    out = []
    w = out.append
    w(
        f"Switchyard benchmark: {args.seconds:g} s per phase after {args.warmup:g} s warm-up, "
        f"wrk -t{'/'.join(map(str, threads))}, {args.cpus or '?'} CPUs, CLK_TCK={args.clk_tck}"
    )
    head = (
        f"{'scenario':<11} {'conc':>4} | {'direct req/s':>12} {'p50 ms':>7} {'p99 ms':>7} | "
        f"{'gateway req/s':>13} {'p50 ms':>7} {'p99 ms':>7} | "
        f"{'added p50 µs':>12} {'gw/direct':>9} {'gw CPU µs/req':>13} {'usr/sys':>9} {'up CPU d/g':>10} "
        f"{'other CPUs d/g':>14} {'errors':>6}"
    )
    w("")
    w(head)
    w("-" * len(head))
    rows = {}
    for scenario in scenarios:
        for c in sorted({c for (s, _, c) in phases if s == scenario}):
            d = phases.get((scenario, "direct", c))
            g = phases.get((scenario, "gateway", c))
            if not d or not g:
                continue
            added = g["p50_us"] - d["p50_us"]
            ratio = g["rps"] / d["rps"] if d["rps"] else float("nan")
            rows[(scenario, c)] = {
                "direct": d,
                "gateway": g,
                "added_p50_us": added,
                "added_p99_us": g["p99_us"] - d["p99_us"],
                "ratio": ratio,
            }
            up = f"{d['upstream_cpu_us_per_req']:.0f}/{g['upstream_cpu_us_per_req']:.0f}"
            split = f"{g['gateway_user_us_per_req']:.0f}/{g['gateway_sys_us_per_req']:.0f}"
            other = f"{d['other_cpus']:.2f}/{g['other_cpus']:.2f}"
            w(
                f"{scenario:<11} {c:>4} | {d['rps']:>12,.0f} {d['p50_us'] / 1e3:>7.3f} "
                f"{d['p99_us'] / 1e3:>7.3f} | {g['rps']:>13,.0f} {g['p50_us'] / 1e3:>7.3f} "
                f"{g['p99_us'] / 1e3:>7.3f} | {added:>12,.0f} {ratio:>9.0%} "
                f"{g['gateway_cpu_us_per_req']:>13.1f} {split:>9} {up:>10} {other:>14} "
                f"{d['errors'] + g['errors']:>6}"
            )
    proxied = reference_rows(phases, rows)
    if proxied:
        w("")
        w(
            "The reference proxy (nginx as a keep-alive reverse proxy to the same upstream: no "
            "JSON, no log, no routing), under the same load as the gateway; CPU is user + system:"
        )
        for (scenario, c), r in proxied.items():
            p, g = r["proxy"], r["gateway"]
            w(
                f"  {scenario} c={c}: proxy {p['rps']:,.0f} req/s ({r['proxy_ratio']:.0%} of direct), "
                f"added p50 {r['proxy_added_p50_us']:,.0f} µs, CPU {p['proxy_cpu_us_per_req']:.1f} µs/req "
                f"({p['proxy_user_us_per_req']:.1f} + {p['proxy_sys_us_per_req']:.1f}); gateway "
                f"{g['rps']:,.0f} req/s ({r['gateway_ratio']:.0%}), added p50 {r['gateway_added_p50_us']:,.0f} µs, "
                f"CPU {g['gateway_cpu_us_per_req']:.1f} µs/req ({g['gateway_user_us_per_req']:.1f} + "
                f"{g['gateway_sys_us_per_req']:.1f})"
            )
    w("")
    rss_mb = args.rss_kb / 1024
    w(f"Gateway RSS after the load phases: {rss_mb:.1f} MB (VmRSS; peak {args.hwm_kb / 1024:.1f} MB)")
    streams_mb = streams["rss_kb"] / 1024
    wave = streams.get("wave", streams["streams"])
    opened = "opened at once" if wave >= streams["streams"] else f"opened {wave:,} at a time"
    w(
        f"Gateway RSS with {streams['streams']:,} streams open ({opened}): {streams_mb:.1f} MB "
        f"(before opening them {streams['rss_before_kb'] / 1024:.1f} MB; with them "
        f"{streams['rss_file_kb'] / 1024:.1f} MB code and mapped files, "
        f"{streams['rss_anon_kb'] / 1024:.1f} MB allocated)"
    )
    dfb = ttfb["direct"]["first_byte"]["median_us"]
    gfb = ttfb["gateway"]["first_byte"]["median_us"]
    dfe = ttfb["direct"]["first_event"]["median_us"]
    gfe = ttfb["gateway"]["first_event"]["median_us"]
    ttfb_added = gfb - dfb
    w(
        f"Streaming at c=1 ({ttfb['n']} sequential requests each, medians): "
        f"TTFB direct {dfb:,.0f} µs, gateway {gfb:,.0f} µs, added {ttfb_added:,.0f} µs "
        f"(first SSE event: added {gfe - dfe:,.0f} µs)"
    )
    if ttfb_proxy:
        first_byte = {t: ttfb_proxy[t]["first_byte"]["median_us"] for t in ("direct", "gateway")}
        proxy_ttfb_added = first_byte["gateway"] - first_byte["direct"]
        w(f"Streaming at c=1 through the reference proxy: TTFB added {proxy_ttfb_added:,.0f} µs (same method)")
    if startup:
        w(
            f"Start to first answer: {startup['median_ms']:.1f} ms (median of "
            f"{len(startup['runs_ms']) - 1} starts; {startup['empty_store_ms']:.1f} ms on an empty store)"
        )
    # What the c=1 latency figures are made of: a proxy puts one more round trip between two
    # processes inside each request, and on some machines waking the other CPU costs far more
    # than the proxy's own work.
    hop_note = ""
    if hops:
        apart = hops.get("two_cpus", hops["unpinned"])["median_us"]
        w(
            f"One more hop on this machine (bench/hops.py, medians): a loopback round trip "
            f"between two processes takes {apart:,.0f} µs on two CPUs, "
            f"{hops['one_cpu']['median_us']:,.0f} µs on one ({hops['unpinned']['median_us']:,.0f} µs "
            f"unpinned). A proxy adds one to every request, so its added latency at c=1 "
            f"includes one, at whichever of those costs the scheduler gives it."
        )
        hop_note = f"; one round trip here: {apart / 1e3:.3f} ms on two CPUs"
    w("")

    checks = []

    def check(name, target, value, ok):
        checks.append((name, target, value, ok))

    # Where the reference proxy ran too, each figure is followed by the proxy's: what a proxy
    # that does next to nothing reaches on this machine.
    def proxy(size, c, text):
        r = proxied.get((f"json {size}", c))
        return f"; proxy {text(r)}" if r else ""

    for size, limit in CPU_TARGETS_US.items():
        levels = [c for (s, c) in rows if s == f"json {size}"]
        if levels:
            worst = max(levels, key=lambda c: rows[(f"json {size}", c)]["gateway"]["gateway_cpu_us_per_req"])
            cpu = rows[(f"json {size}", worst)]["gateway"]["gateway_cpu_us_per_req"]
            floor = proxy(size, worst, lambda r: f"{r['proxy']['proxy_cpu_us_per_req']:.1f} µs")
            check(f"CPU per request, {size} body", f"<= {limit:g} µs", f"{cpu:.1f} µs (c={worst}){floor}", cpu <= limit)
    if ("json 4k", 1) in rows:
        r = rows[("json 4k", 1)]
        floor = proxy("4k", 1, lambda p: f"{p['proxy_added_p50_us'] / 1e3:.3f} ms")
        check("added p50 at c=1, 4k", f"<= {ADDED_P50_US_C1 / 1e3:g} ms", f"{r['added_p50_us'] / 1e3:.3f} ms{floor}{hop_note}", r["added_p50_us"] <= ADDED_P50_US_C1)
        added_p99 = r["added_p99_us"]
        if added_p99 < 0:
            # The direct run's tail was the longer one: a stall in that run, not a gateway
            # that takes latency away. No figure, rather than a target met by noise.
            direct_p99 = r["direct"]["p99_us"]
            check("added p99 at c=1, 4k", f"<= {ADDED_P99_US_C1 / 1e3:g} ms", f"none: direct p99 {direct_p99 / 1e3:.3f} ms above the gateway's; run again", None)
        else:
            check("added p99 at c=1, 4k", f"<= {ADDED_P99_US_C1 / 1e3:g} ms", f"{added_p99 / 1e3:.3f} ms", added_p99 <= ADDED_P99_US_C1)
    if ("json 4k", 64) in rows:
        ratio = rows[("json 4k", 64)]["ratio"]
        floor = proxy("4k", 64, lambda p: f"{p['proxy_ratio']:.0%}")
        check("throughput at c=64, 4k", f">= {RATIO_C64:.0%} of direct", f"{ratio:.0%}{floor}", ratio >= RATIO_C64)
    stream_rows = [r for (s, c), r in rows.items() if s.startswith("stream")]
    if stream_rows:
        per_event = max(r["gateway"]["gateway_cpu_us_per_req"] for r in stream_rows) / max(args.events, 1)
        check("CPU per forwarded event", f"<= {CPU_PER_EVENT_US:g} µs", f"{per_event:.2f} µs (whole request ÷ events)", per_event <= CPU_PER_EVENT_US)
    ttfb_floor = f"; proxy {proxy_ttfb_added / 1e3:.3f} ms" if ttfb_proxy else ""
    check("stream TTFB added at c=1", f"<= {TTFB_ADDED_US / 1e3:g} ms", f"{ttfb_added / 1e3:.3f} ms{ttfb_floor}{hop_note}", ttfb_added <= TTFB_ADDED_US)
    # The target is defined at 1,000 streams; fewer would meet it for the wrong reason.
    if streams["streams"] >= TARGET_STREAMS:
        check(f"RSS, {streams['streams']:,} open streams", f"<= {STREAMS_RSS_MB:g} MB", f"{streams_mb:.1f} MB", streams_mb <= STREAMS_RSS_MB)
    if startup:
        check("start to first answer", f"<= {STARTUP_MS:g} ms", f"{startup['median_ms']:.1f} ms", startup["median_ms"] <= STARTUP_MS)
    w("Targets (reported, not asserted):")
    for name, target, value, ok in checks:
        status = "NOISY " if ok is None else "MET   " if ok else "MISSED"
        w(f"  [{status}] {name:<30} target {target:<18} measured {value}")
    busy = [
        f"{s} {t} c={c} ({ph['other_cpus']:.2f} CPUs)"
        for (s, t, c), ph in phases.items()
        if ph["other_cpus"] > OTHER_CPUS_WARN
    ]
    if busy:
        w("")
        w("WARNING: other processes were busy during " + ", ".join(busy) + "; those figures are skewed.")
    total_errors = sum(ph["errors"] for ph in phases.values())
    if total_errors:
        w("")
        w(f"WARNING: {total_errors} failed requests (socket errors or status >= 400); req/s and CPU per request count only the answered ones.")
    print("\n".join(out))

    if args.json:
        summary = {
            "seconds": args.seconds,
            "warmup": args.warmup,
            "clk_tck": args.clk_tck,
            "phases": {f"{s} c={c}": r for (s, c), r in rows.items()},
            "rss_mb": rss_mb,
            "streams": streams,
            "ttfb": ttfb,
            "startup": startup,
            "hops": hops,
            "reference_proxy": {f"{s} c={c}": r for (s, c), r in proxied.items()},
            "ttfb_proxy": ttfb_proxy,
            "targets": [{"name": n, "target": t, "measured": v, "met": ok} for n, t, v, ok in checks],
        }
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
