#!/usr/bin/env bash
# Switchyard benchmark: the same load straight to the fake provider and through the gateway.
#
#   bash bench/run.sh                      # from the repository root
#   BENCH_SECONDS=5 bash bench/run.sh      # shorter phases
#
# See bench/README.md for what each figure means. Targets are reported, never asserted:
# the script exits 0 when a target is missed, non-zero only when the benchmark itself fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BENCH_SECONDS=${BENCH_SECONDS:-10}       # measured seconds per load phase
BENCH_WARMUP=${BENCH_WARMUP:-2}          # unmeasured warm-up seconds before each phase
BENCH_CONCURRENCY=${BENCH_CONCURRENCY:-"1 16 64"}
BENCH_THREADS=${BENCH_THREADS:-1}        # wrk threads (capped at the connection count)
BENCH_TTFB_N=${BENCH_TTFB_N:-200}        # streamed requests per target for TTFB
BENCH_GATEWAY_LOG=${BENCH_GATEWAY_LOG:-warn}  # SWITCHYARD_LOG for the gateway

log() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }

for var in BENCH_SECONDS BENCH_WARMUP BENCH_THREADS BENCH_TTFB_N; do
    [[ ${!var} =~ ^[0-9]+$ ]] || die "$var must be a whole number, not '${!var}'"
done
((BENCH_SECONDS > 0)) || die "BENCH_SECONDS must be at least 1"
((BENCH_THREADS > 0)) || die "BENCH_THREADS must be at least 1"
for c in $BENCH_CONCURRENCY; do
    [[ $c =~ ^[1-9][0-9]*$ ]] || die "BENCH_CONCURRENCY holds '$c', not a positive number"
done

# --- tools --------------------------------------------------------------------------------
command -v python3 >/dev/null || die "python3 is required"
command -v cargo >/dev/null || die "cargo is required"
if ! command -v wrk >/dev/null; then
    log "wrk not found; installing it from the distribution's packages"
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || die "wrk is missing and we are not root; install wrk"
        sudo=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! "${sudo[@]}" apt-get install -y wrk >&2; then
        "${sudo[@]}" apt-get update >&2
        "${sudo[@]}" apt-get install -y wrk >&2
    fi
    command -v wrk >/dev/null || die "could not install wrk"
fi

# --- build --------------------------------------------------------------------------------
log "building the release binary (cargo build --release)"
cargo build --release >&2
BIN="${CARGO_TARGET_DIR:-target}/release/switchyard"
[[ -x $BIN ]] || die "no binary at $BIN"

CLK_TCK=$(getconf CLK_TCK)
CPUS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 0)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-bench.XXXXXX")

# --- process lifecycle --------------------------------------------------------------------
PIDS=()
cleanup() {
    local status=$?
    local pid i
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if ((status != 0)); then
        local f
        for f in "$WORK"/*.out "$WORK"/*.err; do
            [[ -s $f ]] || continue
            printf '[bench] --- last lines of %s ---\n' "$f" >&2
            tail -n 20 "$f" >&2
        done
    fi
    if [[ ${BENCH_KEEP:-0} == 1 ]]; then
        log "raw results kept in $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits up to $4 seconds for a file to contain a pattern, failing early if $3 exits.
wait_for_line() {
    local file=$1 pattern=$2 pid=$3 limit=$4
    local deadline=$((SECONDS + limit))
    until grep -q -- "$pattern" "$file" 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || die "process $pid exited before printing '$pattern'"
        ((SECONDS < deadline)) || die "no '$pattern' in $file after ${limit}s"
        sleep 0.05
    done
}

# Waits up to $4 seconds until 127.0.0.1:$1 accepts connections or $2's log says it
# listens; fails early if process $3 exits.
wait_for_listen() {
    local port=$1 file=$2 pid=$3 limit=$4
    local deadline=$((SECONDS + limit))
    until grep -q 'switchyard listening' "$file" 2>/dev/null ||
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || die "gateway exited before listening"
        ((SECONDS < deadline)) || die "gateway not listening on port $port after ${limit}s"
        sleep 0.05
    done
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# utime + stime of a whole process (all its threads), in clock ticks.
cpu_ticks() {
    local stat
    stat=$(<"/proc/$1/stat")
    stat=${stat##*) } # drop "pid (comm) ": comm may hold spaces
    local -a f
    read -r -a f <<<"$stat"
    # f[0] is field 3 (state), so utime (field 14) is f[11] and stime (field 15) is f[12].
    echo $((f[11] + f[12]))
}

# Busy (non-idle) clock ticks of the whole machine, all CPUs, from the first line of /proc/stat.
sys_busy_ticks() {
    local _cpu user nice system idle iowait irq softirq steal _rest
    read -r _cpu user nice system idle iowait irq softirq steal _rest </proc/stat
    echo $((user + nice + system + irq + softirq + steal))
}

# Sets CHILD_CPU_MS: user + system CPU of this shell's finished children (wrk included), in
# ms. `times` must run in this shell, not a subshell, to see them.
child_cpu_ms() {
    times >"$WORK/times.txt"
    local _self user sys
    { read -r _self; read -r user sys; } <"$WORK/times.txt"
    CHILD_CPU_MS=$(($(to_ms "$user") + $(to_ms "$sys")))
}
to_ms() { # 1m2.345s -> 62345
    local minutes=${1%%m*} seconds=${1#*m}
    seconds=${seconds%s}
    echo $((10#$minutes * 60000 + 10#${seconds%.*} * 1000 + 10#${seconds#*.}))
}

proc_status_kb() {
    awk -v key="$2:" '$1 == key { print $2 }' "/proc/$1/status"
}

# --- fake provider ------------------------------------------------------------------------
"$BIN" fake-upstream --listen 127.0.0.1:0 --name bench >"$WORK/fake.out" 2>"$WORK/fake.err" &
FAKE_PID=$!
PIDS+=("$FAKE_PID")
wait_for_line "$WORK/fake.out" 'fake upstream' "$FAKE_PID" 30
FAKE_ADDR=$(grep -o 'http://[0-9.]*:[0-9]*/v1' "$WORK/fake.out" | head -n 1)
FAKE_ADDR=${FAKE_ADDR#http://}
FAKE_ADDR=${FAKE_ADDR%/v1}
[[ $FAKE_ADDR == 127.0.0.1:* ]] || die "cannot read the fake's address from $WORK/fake.out"
log "fake provider (pid $FAKE_PID) on $FAKE_ADDR"

# --- gateway ------------------------------------------------------------------------------
GW_PORT=$(free_port)
GW_ADDR=127.0.0.1:$GW_PORT
cat >"$WORK/gateway.toml" <<EOF
[server]
listen = "$GW_ADDR"

[auth]
required = false

# A file, as in a deployment (the request log is written to it), but in the temporary
# directory: the default would create switchyard.db and its key file in the repository.
[store]
url = "sqlite://$WORK/switchyard.db"

[[providers]]
name = "up"
kind = "openai"
base_url = "http://$FAKE_ADDR/v1"
key_required = false

[[routes]]
name = "bench"
steps = [{ provider = "up", model = "m" }]
EOF
# A throwaway master key for the store's vault, so none is generated beside the database.
MASTER_KEY=$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')
# The per-request log line is at info level: `warn` keeps logging off the measured path.
SWITCHYARD_LOG=$BENCH_GATEWAY_LOG SWITCHYARD_MASTER_KEY=$MASTER_KEY NO_COLOR=1 \
    "$BIN" serve --config "$WORK/gateway.toml" >"$WORK/gateway.out" 2>"$WORK/gateway.err" &
GW_PID=$!
PIDS+=("$GW_PID")
wait_for_listen "$GW_PORT" "$WORK/gateway.err" "$GW_PID" 30
log "gateway (pid $GW_PID, SWITCHYARD_LOG=$BENCH_GATEWAY_LOG) on $GW_ADDR"

DIRECT_BODY='{"model":"m","messages":[{"role":"user","content":"Hello"}]}'
GATEWAY_BODY='{"model":"bench","messages":[{"role":"user","content":"Hello"}]}'
DIRECT_URL="http://$FAKE_ADDR/v1/chat/completions"
GATEWAY_URL="http://$GW_ADDR/v1/chat/completions"

# One request each way before any load: both must answer 200 with a completion.
if ! python3 - "$DIRECT_URL" "$DIRECT_BODY" "$GATEWAY_URL" "$GATEWAY_BODY" <<'PY'; then
import json, sys, urllib.request
args = sys.argv[1:]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
for url, body in zip(args[::2], args[1::2]):
    req = urllib.request.Request(url, data=body.encode(), headers={"Content-Type": "application/json"})
    with opener.open(req, timeout=10) as resp:
        answer = json.load(resp)
        assert resp.status == 200 and answer.get("object") == "chat.completion", answer
PY
    die "a sanity request failed; see the logs below"
fi

# --- load phases --------------------------------------------------------------------------
RESULTS=$WORK/results.jsonl
: >"$RESULTS"

# run_phase NAME URL BODY CONNECTIONS
run_phase() {
    local name=$1 url=$2 body=$3 conns=$4
    local threads=$((BENCH_THREADS < conns ? BENCH_THREADS : conns))
    local wrk=(wrk --timeout 5s -t"$threads" -c"$conns" -s bench/wrk.lua)
    if ((BENCH_WARMUP > 0)); then
        BENCH_BODY=$body timeout $((BENCH_WARMUP + 30)) \
            "${wrk[@]}" -d"${BENCH_WARMUP}s" "$url" >"$WORK/warmup-$name-c$conns.out"
    fi
    local gw_before fake_before sys_before cpu_before t_before
    local gw_after fake_after sys_after t_after
    child_cpu_ms
    cpu_before=$CHILD_CPU_MS
    t_before=$EPOCHREALTIME
    sys_before=$(sys_busy_ticks)
    gw_before=$(cpu_ticks "$GW_PID")
    fake_before=$(cpu_ticks "$FAKE_PID")
    BENCH_BODY=$body timeout $((BENCH_SECONDS + 30)) \
        "${wrk[@]}" --latency -d"${BENCH_SECONDS}s" "$url" >"$WORK/wrk-$name-c$conns.out"
    gw_after=$(cpu_ticks "$GW_PID")
    fake_after=$(cpu_ticks "$FAKE_PID")
    sys_after=$(sys_busy_ticks)
    t_after=$EPOCHREALTIME
    child_cpu_ms
    local json
    json=$(sed -n 's/^WRK_RESULT //p' "$WORK/wrk-$name-c$conns.out")
    [[ -n $json ]] || die "wrk printed no result for $name c=$conns"
    # Wall time in µs, from $EPOCHREALTIME's "seconds.micros".
    local wall_us=$(((${t_after%.*} - ${t_before%.*}) * 1000000 + 10#${t_after#*.} - 10#${t_before#*.}))
    printf '{"target":"%s","conns":%d,"threads":%d,"gateway_cpu_ticks":%d,"fake_cpu_ticks":%d,"machine_busy_ticks":%d,"wrk_cpu_ms":%d,"wall_us":%d,"wrk":%s}\n' \
        "$name" "$conns" "$threads" $((gw_after - gw_before)) $((fake_after - fake_before)) \
        $((sys_after - sys_before)) $((CHILD_CPU_MS - cpu_before)) "$wall_us" "$json" >>"$RESULTS"
    log "$name c=$conns: $(grep -E '^Requests/sec' "$WORK/wrk-$name-c$conns.out" || true)"
}

for c in $BENCH_CONCURRENCY; do
    run_phase direct "$DIRECT_URL" "$DIRECT_BODY" "$c"
    run_phase gateway "$GATEWAY_URL" "$GATEWAY_BODY" "$c"
done

# --- streaming TTFB at concurrency 1 ------------------------------------------------------
log "streaming TTFB: $BENCH_TTFB_N sequential requests each way"
timeout 300 python3 bench/ttfb.py --direct "$FAKE_ADDR" --gateway "$GW_ADDR" \
    -n "$BENCH_TTFB_N" >"$WORK/ttfb.json"

# --- memory, then the report --------------------------------------------------------------
kill -0 "$GW_PID" 2>/dev/null || die "the gateway died during the run"
RSS_KB=$(proc_status_kb "$GW_PID" VmRSS)
HWM_KB=$(proc_status_kb "$GW_PID" VmHWM)
GW_LOG_LINES=$(wc -l <"$WORK/gateway.err")

echo
python3 bench/report.py --results "$RESULTS" --ttfb "$WORK/ttfb.json" \
    --rss-kb "$RSS_KB" --hwm-kb "$HWM_KB" --clk-tck "$CLK_TCK" --cpus "$CPUS" \
    --seconds "$BENCH_SECONDS" --warmup "$BENCH_WARMUP" ${BENCH_JSON:+--json "$BENCH_JSON"}
if ((GW_LOG_LINES > 0)); then
    echo
    echo "note: the gateway wrote $GW_LOG_LINES log line(s) at SWITCHYARD_LOG=$BENCH_GATEWAY_LOG; first one:"
    head -n 1 "$WORK/gateway.err"
fi
