#!/usr/bin/env bash
# Instructions per request through the gateway, counted by callgrind: repeatable on a busy
# machine, where times are not.
#
#   bash bench/instructions.sh                 # from the repository root
#   INSTR_REQUESTS=50 bash bench/instructions.sh
#
# The gateway runs under `valgrind --tool=callgrind` in front of nginx (which is not counted).
# For each scenario it takes INSTR_WARMUP requests, zeroes the counters, sends INSTR_REQUESTS
# requests one at a time on one keep-alive connection, waits for the request log's writer to
# settle, and dumps the counters: instructions per request = total / requests. The count
# covers every thread of the gateway (handler, HTTP client, log writer), so the log's cost is
# in it. See bench/README.md.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

INSTR_REQUESTS=${INSTR_REQUESTS:-200}    # measured requests per scenario
INSTR_WARMUP=${INSTR_WARMUP:-20}         # unmeasured requests before each scenario
INSTR_EVENTS=${INSTR_EVENTS:-500}        # content events in the stream scenario
INSTR_SIZES=${INSTR_SIZES-"64 4k 32k 128k"}   # set but empty: no body-size scenario
# Bodies in several languages with every non-ASCII character a \u escape (bodies.py
# --escaped), as Python's json.dumps writes them; set but empty: none.
INSTR_ESCAPED_SIZES=${INSTR_ESCAPED_SIZES-"128k"}
INSTR_STREAM=${INSTR_STREAM:-1}          # 0: no stream scenario
INSTR_PROXY=${INSTR_PROXY:-1}            # 0: no reference proxy line
INSTR_CACHE=${INSTR_CACHE:-1}            # 0: no response-cache hit scenario
INSTR_TRACED=${INSTR_TRACED:-0}          # 1: every request traced, spans exported (OTLP)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-instr.XXXXXX")
PIDS=()
# shellcheck source=bench/lib.sh
source bench/lib.sh

for var in INSTR_REQUESTS INSTR_WARMUP INSTR_EVENTS; do
    [[ ${!var} =~ ^[1-9][0-9]*$ ]] || die "$var must be a positive whole number, not '${!var}'"
done

cleanup() {
    local status=$? pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if ((status != 0)); then
        for f in "$WORK"/*.err; do
            [[ -s $f ]] && { printf '[bench] --- %s ---\n' "$f" >&2; tail -n 20 "$f" >&2; }
        done
    fi
    if [[ ${BENCH_KEEP:-0} == 1 ]]; then log "raw results kept in $WORK"; else rm -rf "$WORK"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

command -v python3 >/dev/null || die "python3 is required"
need valgrind valgrind
need callgrind_control valgrind

# BENCH_BIN measures a binary built elsewhere (another commit, for a before/after pair).
if [[ -n ${BENCH_BIN:-} ]]; then
    BIN=$BENCH_BIN
else
    log "building the release binary (cargo build --release)"
    cargo build --release >&2
    BIN="${CARGO_TARGET_DIR:-target}/release/switchyard"
fi
[[ -x $BIN ]] || die "no binary at $BIN"

start_nginx "$INSTR_EVENTS"
GW_PORT=$(free_port)
write_gateway_config "$GW_PORT"
gateway_env=(SWITCHYARD_MASTER_KEY="$(master_key)" NO_COLOR=1)
# At its default log level unless told, as users run it (one line per request, off the path).
[[ -n ${BENCH_GATEWAY_LOG:-} ]] && gateway_env+=(SWITCHYARD_LOG="$BENCH_GATEWAY_LOG")
# One profile per thread, so the threads serving connections are counted apart from the log
# writer, whose batches (and so its cost per request) vary from run to run under callgrind.
env "${gateway_env[@]}" valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$WORK/callgrind.out.%p" \
    "$BIN" serve --config "$WORK/gateway.toml" >"$WORK/gateway.out" 2>"$WORK/gateway.err" &
GW_PID=$!
PIDS+=("$GW_PID")
wait_for_port "$GW_PORT" "$GW_PID" 300
log "gateway under callgrind (pid $GW_PID) on 127.0.0.1:$GW_PORT"

# Dumps the counters; prints the instructions of every thread, then of the threads that serve
# connections (`switchyard-serve-N`: the only threads running a single-threaded runtime).
dump_totals() {
    callgrind_control -d "$GW_PID" >/dev/null
    local file all=0 serving=0 total dump
    # Dumps are numbered from 1; each thread's lands in callgrind.out.PID.DUMP-THREAD.
    dump=$(ls "$WORK" | sed -n "s/^callgrind\.out\.$GW_PID\.\([0-9]*\)-.*/\1/p" | sort -n | tail -n 1)
    for file in "$WORK"/callgrind.out."$GW_PID"."$dump"-*; do
        total=$(awk '/^(totals|summary):/ { print $2; exit }' "$file")
        [[ $total =~ ^[0-9]+$ ]] || continue
        all=$((all + total))
        if grep -q 'scheduler::current_thread::Context::run_task' "$file"; then
            serving=$((serving + total))
        fi
    done
    echo "$all $serving"
}

URL=http://127.0.0.1:$GW_PORT/v1/chat/completions
printf '%-22s %10s %16s %18s %16s\n' scenario requests "instr/request" "instr/event" "serving/request"
# scenario NAME BODY_FILE [--stream]
scenario() {
    local name=$1 body=$2 stream=${3:-}
    python3 bench/send.py "$URL" "$body" "$INSTR_WARMUP" $stream >/dev/null
    sleep 1 # let the log writer commit the warm-up's batch before counting
    callgrind_control -z "$GW_PID" >/dev/null
    local events
    events=$(python3 bench/send.py "$URL" "$body" "$INSTR_REQUESTS" $stream)
    sleep 1 # the writer's batch for these requests belongs to them
    local total serving per_request per_event=-
    read -r total serving < <(dump_totals)
    [[ $total =~ ^[0-9]+$ && $total -gt 0 ]] || die "no instruction total for $name"
    per_request=$((total / INSTR_REQUESTS))
    if [[ -n $stream ]]; then per_event=$((total / events)); fi
    printf '%-22s %10d %16d %18s %16d\n' "$name" "$INSTR_REQUESTS" "$per_request" "$per_event" \
        "$((serving / INSTR_REQUESTS))"
    [[ -n ${INSTR_JSON:-} ]] && printf '{"scenario":"%s","requests":%d,"instructions":%d,"serving":%d,"per_request":%d,"per_event":"%s"}\n' \
        "$name" "$INSTR_REQUESTS" "$total" "$serving" "$per_request" "$per_event" >>"$INSTR_JSON"
    return 0
}

for size in $INSTR_SIZES; do
    python3 bench/bodies.py chat "$size" bench >"$WORK/body-$size.json"
    scenario "json $size" "$WORK/body-$size.json"
done
for size in $INSTR_ESCAPED_SIZES; do
    python3 bench/bodies.py chat "$size" bench --escaped >"$WORK/body-$size-escaped.json"
    scenario "json $size escaped" "$WORK/body-$size-escaped.json"
done
# The 4 KB body on a route that caches (bench/lib.sh): the warm-up's first request keeps the
# answer, and every measured one is a hit, next to "json 4k", the same request upstream.
if [[ $INSTR_CACHE != 0 ]]; then
    python3 bench/bodies.py chat 4k bench-cached >"$WORK/body-cached.json"
    scenario "json 4k cache hit" "$WORK/body-cached.json"
fi
if [[ $INSTR_STREAM != 0 ]]; then
    python3 bench/bodies.py chat 4k bench-stream --stream >"$WORK/body-stream.json"
    scenario "stream 4k, $INSTR_EVENTS events" "$WORK/body-stream.json" --stream
fi

# The reference proxy (nginx as a keep-alive reverse proxy, bench/lib.sh) under callgrind with
# the same 4 KB body: the instructions a proxy that does next to nothing spends a request.
if [[ $INSTR_PROXY != 0 ]]; then
    PROXY_LAUNCHER=(valgrind --tool=callgrind --callgrind-out-file="$WORK/proxy.callgrind.%p")
    start_reference_proxy
    python3 bench/bodies.py chat 4k m >"$WORK/body-proxy.json"
    PROXY_URL=http://$PROXY_ADDR/json/v1/chat/completions
    python3 bench/send.py "$PROXY_URL" "$WORK/body-proxy.json" "$INSTR_WARMUP" >/dev/null
    callgrind_control -z "$PROXY_PID" >/dev/null
    python3 bench/send.py "$PROXY_URL" "$WORK/body-proxy.json" "$INSTR_REQUESTS" >/dev/null
    callgrind_control -d "$PROXY_PID" >/dev/null
    # One process, one thread: the dump is proxy.callgrind.PID.1.
    proxy_total=$(awk '/^(totals|summary):/ { print $2; exit }' "$WORK/proxy.callgrind.$PROXY_PID.1")
    [[ $proxy_total =~ ^[0-9]+$ && $proxy_total -gt 0 ]] || die "no instruction total for the reference proxy"
    printf '%-22s %10d %16d %18s %16s\n' "proxy: json 4k" "$INSTR_REQUESTS" \
        "$((proxy_total / INSTR_REQUESTS))" - -
    if [[ -n ${INSTR_JSON:-} ]]; then
        printf '{"scenario":"proxy: json 4k","requests":%d,"instructions":%d,"per_request":%d}\n' \
            "$INSTR_REQUESTS" "$proxy_total" "$((proxy_total / INSTR_REQUESTS))" >>"$INSTR_JSON"
    fi
fi
