#!/usr/bin/env bash
# The instruction floor: counts the instructions of the 4 KB, 128 KB, response-cache hit and
# stream scenarios with
# bench/instructions.sh (callgrind: counts, not times, so a busy machine gives the same figure)
# and fails when a held one (baseline.json's "scenarios"; 128 KB is reported, not held) rises
# by more than its margin (10 % for the
# serving threads and per stream event, 20 % for every thread's count, which the log writer's
# batching moves by up to 7 % from run to run). scripts/test runs it.
#
#   bash bench/floor.sh            # check
#   bash bench/floor.sh --update   # write today's figures as the new baseline
#
# A change that needs more instructions updates the baseline in the same commit and says why.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

figures=$(mktemp "${TMPDIR:-/tmp}/switchyard-floor.XXXXXX")
trap 'rm -f "$figures"' EXIT
# The baseline's own settings: a figure is only comparable with one counted the same way.
INSTR_JSON=$figures INSTR_REQUESTS=50 INSTR_WARMUP=10 INSTR_EVENTS=500 \
    INSTR_SIZES="4k 128k" INSTR_ESCAPED_SIZES="" INSTR_STREAM=1 INSTR_PROXY=0 INSTR_CACHE=1 \
    bash bench/instructions.sh
python3 bench/floor.py bench/baseline.json "$figures" "$@"
