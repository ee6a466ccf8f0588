"""Compares instruction counts (bench/instructions.sh's INSTR_JSON lines) with the baseline.

    python3 bench/floor.py BASELINE FIGURES            # exit 1 when a figure is over the margin
    python3 bench/floor.py BASELINE FIGURES --update   # write FIGURES as the new BASELINE
"""

import json
import sys

# What is held per scenario: every thread's instructions per request (per event for a
# stream), and the serving threads' alone.
METRICS = ("per_request", "serving_per_request", "per_event")

# How far each may rise. Every thread's count per request moved by up to 7 % between runs of
# one binary (the log writer's batches fall differently under callgrind), the serving
# threads' by up to 5 % (hash seeds differ per process), the stream's per event by 1 %: a
# margin of 10 % on the first would fail unchanged code now and then.
MARGINS = {"per_request": 0.20, "serving_per_request": 0.10, "per_event": 0.10}


def figures_of(path):
    found = {}
    with open(path) as lines:
        for line in lines:
            row = json.loads(line)
            figures = {
                "per_request": row["per_request"],
                "serving_per_request": row["serving"] // row["requests"],
            }
            if row.get("per_event", "-") != "-":
                figures["per_event"] = int(row["per_event"])
            found[row["scenario"]] = figures
    return found


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    baseline_path, figures_path = argv[1], argv[2]
    measured = figures_of(figures_path)
    if "--update" in argv[3:]:
        with open(baseline_path, "w") as out:
            kept = {"margins": MARGINS, "scenarios": measured}
            try:
                with open(baseline_path) as f:
                    # Scenarios counted but not held stay so until someone decides otherwise.
                    unheld = json.load(f).get("reported_not_held", {})
                for name in unheld:
                    kept["scenarios"].pop(name, None)
                kept["reported_not_held"] = unheld
            except FileNotFoundError:
                pass
            json.dump(kept, out, indent=2, sort_keys=True)
            out.write("\n")
        print(f"[floor] wrote {baseline_path}")
        return 0
    with open(baseline_path) as f:
        baseline = json.load(f)
    margins = baseline["margins"]
    over = []
    print(f"{'scenario':<24} {'figure':<20} {'baseline':>10} {'now':>10} {'change':>8}")
    for scenario, held in sorted(baseline["scenarios"].items()):
        now = measured.get(scenario)
        if now is None:
            over.append(f"{scenario}: not measured")
            continue
        for metric in METRICS:
            if metric not in held:
                continue
            was, is_ = held[metric], now[metric]
            change = (is_ - was) / was
            print(f"{scenario:<24} {metric:<20} {was:>10} {is_:>10} {change:>+8.1%}")
            if change > margins[metric]:
                over.append(
                    f"{scenario} {metric}: {was} -> {is_} ({change:+.1%}, "
                    f"more than {margins[metric]:.0%})"
                )
    for scenario in sorted(set(measured) - set(baseline["scenarios"])):
        for metric, is_ in sorted(measured[scenario].items()):
            print(f"{scenario:<24} {metric:<20} {'(not held)':>10} {is_:>10}")
    if over:
        print("[floor] over the baseline:", file=sys.stderr)
        for line in over:
            print(f"  {line}", file=sys.stderr)
        print(
            "[floor] a change that needs more instructions updates bench/baseline.json "
            "(bash bench/floor.sh --update) in the same commit and says why",
            file=sys.stderr,
        )
        return 1
    print("[floor] every figure within its margin of the baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
