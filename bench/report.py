#!/usr/bin/env python3
"""Formats the Switchyard benchmark's raw results (written by bench/run.sh) as a table.

Standard library only. Inputs:
  --results FILE   JSON lines, one per load phase:
                   {"target": "direct"|"gateway", "conns": C, "threads": T,
                    "gateway_cpu_ticks": N, "fake_cpu_ticks": N, "wrk": {...}}
                   where "wrk" is the object bench/wrk.lua prints (latencies in µs).
  --ttfb FILE      the JSON bench/ttfb.py prints.
  --rss-kb / --hwm-kb   the gateway's VmRSS / VmHWM after the run, in kB.
  --clk-tck        clock ticks per second (`getconf CLK_TCK`).
Optionally --json FILE writes the computed figures as JSON.

Targets are reported, never asserted: the exit status is 0 whether or not they are met.
"""

import argparse
import json
import sys

TARGETS = {
    "cpu_us": 30.0,  # gateway CPU per request, µs, at every concurrency
    "added_p50_us_c1": 100.0,  # gateway's added p50 latency at c=1, µs
    "ratio_c64": 0.35,  # gateway req/s ÷ direct req/s at c=64
    "rss_mb": 30.0,  # gateway VmRSS after the run, MB
    "ttfb_added_us": 200.0,  # streaming TTFB added at c=1, µs
}


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
            requests = wrk["requests"]
            seconds = wrk["duration_us"] / 1e6
            errors = sum(wrk[k] for k in wrk if k.startswith("err_"))
            tick_us = 1e6 / clk_tck

            def per_request(ticks):
                return ticks * tick_us / requests if requests else float("nan")

            phases[(row["target"], row["conns"])] = {
                "requests": requests,
                "seconds": seconds,
                "rps": requests / seconds if seconds else 0.0,
                "p50_us": wrk["lat_p50_us"],
                "p90_us": wrk["lat_p90_us"],
                "p99_us": wrk["lat_p99_us"],
                "max_us": wrk["lat_max_us"],
                "errors": errors,
                "gateway_cpu_ticks": row["gateway_cpu_ticks"],
                "gateway_cpu_us_per_req": per_request(row["gateway_cpu_ticks"]),
                "fake_cpu_us_per_req": per_request(row["fake_cpu_ticks"]),
                "threads": row["threads"],
                # CPUs' worth of work by everything but the gateway, the fake and wrk.
                "other_cpus": (
                    row["machine_busy_ticks"] / clk_tck
                    - (row["gateway_cpu_ticks"] + row["fake_cpu_ticks"]) / clk_tck
                    - row["wrk_cpu_ms"] / 1e3
                )
                / (row["wall_us"] / 1e6),
            }
    return phases


def verdict(ok):
    return "MET   " if ok else "MISSED"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True)
    p.add_argument("--ttfb", required=True)
    p.add_argument("--rss-kb", type=int, required=True)
    p.add_argument("--hwm-kb", type=int, required=True)
    p.add_argument("--clk-tck", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--warmup", type=float, required=True)
    p.add_argument("--cpus", type=int, default=0)
    p.add_argument("--json")
    args = p.parse_args()

    phases = load_phases(args.results, args.clk_tck)
    with open(args.ttfb) as f:
        ttfb = json.load(f)
    levels = sorted({c for (_, c) in phases})
    threads = sorted({ph["threads"] for ph in phases.values()})

    out = []
    w = out.append
    w(
        f"Switchyard benchmark: {args.seconds:g} s per phase after {args.warmup:g} s warm-up, "
        f"non-streaming, wrk -t{'/'.join(map(str, threads))}, "
        f"{args.cpus or '?'} CPUs, CLK_TCK={args.clk_tck}"
    )
    w("")
    head = (
        f"{'conc':>4} | {'direct req/s':>12} {'p50 ms':>7} {'p99 ms':>7} | "
        f"{'gateway req/s':>13} {'p50 ms':>7} {'p99 ms':>7} | "
        f"{'added p50 µs':>12} {'gw/direct':>9} {'gw CPU µs/req':>13} {'fake CPU d/g':>12} "
        f"{'other CPUs d/g':>14} {'errors':>6}"
    )
    w(head)
    w("-" * len(head))
    rows = {}
    for c in levels:
        d = phases.get(("direct", c))
        g = phases.get(("gateway", c))
        if not d or not g:
            continue
        added = g["p50_us"] - d["p50_us"]
        ratio = g["rps"] / d["rps"] if d["rps"] else float("nan")
        rows[c] = {"direct": d, "gateway": g, "added_p50_us": added, "ratio": ratio}
        errors = d["errors"] + g["errors"]
        fake_cpu = f"{d['fake_cpu_us_per_req']:.0f}/{g['fake_cpu_us_per_req']:.0f}"
        other = f"{d['other_cpus']:.2f}/{g['other_cpus']:.2f}"
        w(
            f"{c:>4} | {d['rps']:>12,.0f} {d['p50_us'] / 1e3:>7.3f} {d['p99_us'] / 1e3:>7.3f} | "
            f"{g['rps']:>13,.0f} {g['p50_us'] / 1e3:>7.3f} {g['p99_us'] / 1e3:>7.3f} | "
            f"{added:>12,.0f} {ratio:>9.0%} {g['gateway_cpu_us_per_req']:>13.1f} "
            f"{fake_cpu:>12} {other:>14} {errors:>6}"
        )
    w("")
    rss_mb = args.rss_kb / 1024
    hwm_mb = args.hwm_kb / 1024
    w(f"Gateway RSS after the run: {rss_mb:.1f} MB (VmRSS; peak VmHWM {hwm_mb:.1f} MB)")
    dfb = ttfb["direct"]["first_byte"]["median_us"]
    gfb = ttfb["gateway"]["first_byte"]["median_us"]
    dfe = ttfb["direct"]["first_event"]["median_us"]
    gfe = ttfb["gateway"]["first_event"]["median_us"]
    ttfb_added = gfb - dfb
    w(
        f"Streaming at c=1 ({ttfb['n']} sequential requests each, medians): "
        f"TTFB direct {dfb:,.0f} µs, gateway {gfb:,.0f} µs, added {ttfb_added:,.0f} µs"
    )
    w(
        f"  (time to the first SSE event: direct {dfe:,.0f} µs, gateway {gfe:,.0f} µs, "
        f"added {gfe - dfe:,.0f} µs)"
    )
    w("")

    checks = []
    if rows:
        worst_c = max(rows, key=lambda c: rows[c]["gateway"]["gateway_cpu_us_per_req"])
        worst_cpu = rows[worst_c]["gateway"]["gateway_cpu_us_per_req"]
        checks.append(
            (
                "gateway CPU per request",
                f"<= {TARGETS['cpu_us']:g} µs",
                f"{worst_cpu:.1f} µs (worst, c={worst_c})",
                worst_cpu <= TARGETS["cpu_us"],
            )
        )
    if 1 in rows:
        added = rows[1]["added_p50_us"]
        checks.append(
            (
                "added p50 latency at c=1",
                f"<= {TARGETS['added_p50_us_c1'] / 1e3:g} ms",
                f"{added / 1e3:.3f} ms",
                added <= TARGETS["added_p50_us_c1"],
            )
        )
    if 64 in rows:
        ratio = rows[64]["ratio"]
        checks.append(
            (
                "gateway throughput at c=64",
                f">= {TARGETS['ratio_c64']:.0%} of direct",
                f"{ratio:.0%}",
                ratio >= TARGETS["ratio_c64"],
            )
        )
    checks.append(
        (
            "gateway RSS after the run",
            f"<= {TARGETS['rss_mb']:g} MB",
            f"{rss_mb:.1f} MB",
            rss_mb <= TARGETS["rss_mb"],
        )
    )
    checks.append(
        (
            "streaming TTFB added at c=1",
            f"<= {TARGETS['ttfb_added_us'] / 1e3:g} ms",
            f"{ttfb_added / 1e3:.3f} ms",
            ttfb_added <= TARGETS["ttfb_added_us"],
        )
    )
    w("Targets (reported, not asserted):")
    for name, target, value, ok in checks:
        w(f"  [{verdict(ok)}] {name:<28} target {target:<18} measured {value}")
    busy = [
        f"{name} c={c} ({ph['other_cpus']:.2f} CPUs)"
        for (name, c), ph in sorted(phases.items(), key=lambda kv: (kv[0][1], kv[0][0]))
        if ph["other_cpus"] > OTHER_CPUS_WARN
    ]
    if busy:
        w("")
        w(
            "WARNING: other processes were busy during "
            + ", ".join(busy)
            + "; those figures are skewed. Re-run on a quiet machine."
        )
    total_errors = sum(ph["errors"] for ph in phases.values())
    if total_errors:
        w("")
        w(
            f"WARNING: {total_errors} failed requests (socket errors or status >= 400) "
            "during the load phases; req/s include them."
        )
    print("\n".join(out))

    if args.json:
        summary = {
            "seconds": args.seconds,
            "warmup": args.warmup,
            "clk_tck": args.clk_tck,
            "levels": {str(c): r for c, r in rows.items()},
            "rss_mb": rss_mb,
            "hwm_mb": hwm_mb,
            "ttfb": ttfb,
            "targets": [
                {"name": n, "target": t, "measured": v, "met": ok} for n, t, v, ok in checks
            ],
        }
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
