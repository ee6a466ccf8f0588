#!/usr/bin/env bash
# Switchyard benchmark: the same load straight to the upstream and through the gateway.
#
#   bash bench/run.sh                      # from the repository root
#   BENCH_SECONDS=5 bash bench/run.sh      # shorter phases
#
# Scenarios (see bench/README.md):
#   json 64 / 4k / 32k / 128k   non-streamed chat bodies of those sizes, nginx as the upstream
#   stream 500                  a streamed answer of 500 content events, nginx as the upstream
#   failover                    step 0 answers 500, step 1 serves (the built-in fakes)
#   1,000 open streams          the gateway's RSS while that many streams are open
#   start to first answer       launch to the first request's 200, on an empty store and not
#   reference proxy             the body-size phases and the stream TTFB through nginx as a plain
#                               reverse proxy: what a proxy that does next to nothing costs here
# Targets are reported, never asserted: the script exits 0 when a target is missed, non-zero
# only when the benchmark itself fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BENCH_SECONDS=${BENCH_SECONDS:-10}       # measured seconds per load phase
BENCH_WARMUP=${BENCH_WARMUP:-2}          # unmeasured warm-up seconds before each phase
BENCH_CONCURRENCY=${BENCH_CONCURRENCY:-"1 16 64"}
BENCH_SIZES=${BENCH_SIZES:-"64 4k 32k 128k"}
BENCH_THREADS=${BENCH_THREADS:-1}        # wrk threads (capped at the connection count)
BENCH_TTFB_N=${BENCH_TTFB_N:-200}        # streamed requests per target for TTFB
BENCH_EVENTS=${BENCH_EVENTS:-500}        # content events in the stream scenario
BENCH_STREAMS=${BENCH_STREAMS:-1000}     # concurrently open streams for the RSS figure
BENCH_GATEWAY_LOG=${BENCH_GATEWAY_LOG:-}     # SWITCHYARD_LOG for the gateway; unset: its default, as users run it
BENCH_STREAMS_ONLY=${BENCH_STREAMS_ONLY:-0}  # 1: only the open-streams memory figure, then stop
BENCH_STREAMS_HTTP2=${BENCH_STREAMS_HTTP2:-false} # true: the open streams reach their upstream over HTTP/2
BENCH_STREAMS_WAVE=${BENCH_STREAMS_WAVE:-$BENCH_STREAMS} # open the streams this many at a time (default: all at once)
BENCH_PROXY_SIZES=${BENCH_PROXY_SIZES-$BENCH_SIZES}  # body sizes also sent through the reference proxy; empty: none

WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-bench.XXXXXX")
PIDS=()
# shellcheck source=bench/lib.sh
source bench/lib.sh

for var in BENCH_SECONDS BENCH_WARMUP BENCH_THREADS BENCH_TTFB_N BENCH_EVENTS BENCH_STREAMS BENCH_STREAMS_WAVE; do
    [[ ${!var} =~ ^[0-9]+$ ]] || die "$var must be a whole number, not '${!var}'"
done
((BENCH_SECONDS > 0)) || die "BENCH_SECONDS must be at least 1"
((BENCH_STREAMS_WAVE > 0)) || die "BENCH_STREAMS_WAVE must be at least 1"
[[ $BENCH_STREAMS_HTTP2 == true || $BENCH_STREAMS_HTTP2 == false ]] || die "BENCH_STREAMS_HTTP2 must be true or false"
((BENCH_THREADS > 0)) || die "BENCH_THREADS must be at least 1"
for c in $BENCH_CONCURRENCY; do
    [[ $c =~ ^[1-9][0-9]*$ ]] || die "BENCH_CONCURRENCY holds '$c', not a positive number"
done
for s in $BENCH_SIZES; do
    [[ $s =~ ^[1-9][0-9]*k?$ ]] || die "BENCH_SIZES holds '$s', not a size such as 64 or 4k"
done

# --- tools --------------------------------------------------------------------------------
command -v python3 >/dev/null || die "python3 is required"
command -v cargo >/dev/null || die "cargo is required"
[[ $BENCH_STREAMS_ONLY == 1 ]] || need wrk wrk
find_nginx
# Every open stream holds a socket on the client, the gateway and the upstream.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
(($(ulimit -n) > BENCH_STREAMS * 2 + 100)) || die "ulimit -n $(ulimit -n) is too low for $BENCH_STREAMS streams"

# --- build --------------------------------------------------------------------------------
# BENCH_BIN measures a binary built elsewhere (another commit, for a before/after pair).
if [[ -n ${BENCH_BIN:-} ]]; then
    BIN=$BENCH_BIN
else
    log "building the release binary (cargo build --release)"
    cargo build --release >&2
    BIN="${CARGO_TARGET_DIR:-target}/release/switchyard"
fi
[[ -x $BIN ]] || die "no binary at $BIN"

CLK_TCK=$(getconf CLK_TCK)
CPUS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 0)

# --- process lifecycle --------------------------------------------------------------------
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

# "user system" of a whole process (all its threads), in clock ticks.
cpu_split() {
    local stat
    stat=$(<"/proc/$1/stat")
    stat=${stat##*) } # drop "pid (comm) ": comm may hold spaces
    local -a f
    read -r -a f <<<"$stat"
    # f[0] is field 3 (state), so utime (field 14) is f[11] and stime (field 15) is f[12].
    echo "${f[11]} ${f[12]}"
}

# utime + stime of a whole process, in clock ticks.
cpu_ticks() {
    local user sys
    read -r user sys < <(cpu_split "$1")
    echo $((user + sys))
}

# "user system" ticks between two cpu_split readings.
split_delta() {
    local -a before after
    read -r -a before <<<"$1"
    read -r -a after <<<"$2"
    echo "$((after[0] - before[0])) $((after[1] - before[1]))"
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

# Waits until PID has done the work a load phase left it (log lines and log rows still to
# write): its CPU time grows by at most a tick in SETTLE_WINDOW, for at most SETTLE_MAX s.
# A phase's CPU is counted until then, so it carries its own backlog rather than handing it
# to the next phase, and the TTFB requests meet a gateway that is not still writing the
# load's log (without this, the TTFB figure after the load phases was 3x too high).
SETTLE_WINDOW=0.2
SETTLE_MAX=60
settle() {
    local pid=$1 last now i
    last=$(cpu_ticks "$pid")
    for ((i = 0; i < SETTLE_MAX * 5; i++)); do
        sleep "$SETTLE_WINDOW"
        now=$(cpu_ticks "$pid")
        ((now - last <= 1)) && return 0
        last=$now
    done
    log "pid $pid still busy $SETTLE_MAX s after a phase: its figures carry the backlog"
}

proc_status_kb() {
    awk -v key="$2:" '$1 == key { print $2 }' "/proc/$1/status"
}

# --- upstreams ----------------------------------------------------------------------------
# nginx for throughput: it costs a few µs per request, far below the gateway's own cost.
start_nginx "$BENCH_EVENTS"
# nginx as a reverse proxy in front of that nginx: what a proxy that does next to nothing
# costs here, beside the gateway.
start_reference_proxy

# The built-in fakes for the failover scenario and the long-lived streams.
# start_fake NAME SCRIPT: sets FAKE_ADDR and FAKE_PID.
start_fake() {
    local name=$1 script=$2
    "$BIN" fake-upstream --listen 127.0.0.1:0 --name "$name" --script "$script" \
        >"$WORK/fake-$name.out" 2>"$WORK/fake-$name.err" &
    FAKE_PID=$!
    PIDS+=("$FAKE_PID")
    wait_for_line "$WORK/fake-$name.out" 'fake upstream' "$FAKE_PID" 30
    FAKE_ADDR=$(grep -o 'http://[0-9.]*:[0-9]*/v1' "$WORK/fake-$name.out" | head -n 1)
    FAKE_ADDR=${FAKE_ADDR#http://}
    FAKE_ADDR=${FAKE_ADDR%/v1}
    [[ $FAKE_ADDR == 127.0.0.1:* ]] || die "cannot read the fake's address from $WORK/fake-$name.out"
    log "fake $name (pid $FAKE_PID) on $FAKE_ADDR"
}
start_fake failing '{"behaviors":[{"status":500}],"mode":"cycle"}'
FAILING_ADDR=$FAKE_ADDR
start_fake healthy '{"behaviors":[{}],"mode":"cycle"}'
HEALTHY_ADDR=$FAKE_ADDR
HEALTHY_PID=$FAKE_PID
# Streams that stay open about 20 s: 40 chunks, 500 ms apart.
start_fake slow '{"behaviors":[{"chunks":40,"chunk_interval_ms":500}],"mode":"cycle"}'
SLOW_ADDR=$FAKE_ADDR

# --- gateway ------------------------------------------------------------------------------
GW_PORT=$(free_port)
GW_ADDR=127.0.0.1:$GW_PORT
write_gateway_config "$GW_PORT" "$FAILING_ADDR" "$HEALTHY_ADDR"
cat >>"$WORK/gateway.toml" <<EOF2

[[providers]]
name = "slow"
kind = "openai"
base_url = "http://$SLOW_ADDR/v1"
key_required = false
http2 = $BENCH_STREAMS_HTTP2

[[routes]]
name = "slow-stream"
steps = [{ provider = "slow", model = "m" }]
EOF2
gateway_env=(SWITCHYARD_MASTER_KEY="$(master_key)" NO_COLOR=1)
[[ -n $BENCH_GATEWAY_LOG ]] && gateway_env+=(SWITCHYARD_LOG="$BENCH_GATEWAY_LOG")
env "${gateway_env[@]}" "$BIN" serve --config "$WORK/gateway.toml" \
    >"$WORK/gateway.out" 2>"$WORK/gateway.err" &
GW_PID=$!
PIDS+=("$GW_PID")
wait_for_port "$GW_PORT" "$GW_PID" 30
log "gateway (pid $GW_PID, SWITCHYARD_LOG=${BENCH_GATEWAY_LOG:-its default}) on $GW_ADDR"

NGINX_JSON=http://$NGINX_ADDR/json/v1/chat/completions
NGINX_SSE=http://$NGINX_ADDR/sse/v1/chat/completions
GATEWAY_URL=http://$GW_ADDR/v1/chat/completions

# One request each way before any load: every route must answer 200.
python3 bench/bodies.py chat 64 m >"$WORK/sanity-direct.json"
python3 bench/bodies.py chat 64 bench >"$WORK/sanity-gateway.json"
python3 bench/bodies.py chat 64 failover >"$WORK/sanity-failover.json"
python3 bench/bodies.py chat 64 bench-stream --stream >"$WORK/sanity-stream.json"
python3 bench/send.py "$NGINX_JSON" "$WORK/sanity-direct.json" 1 >/dev/null &&
    python3 bench/send.py "$GATEWAY_URL" "$WORK/sanity-gateway.json" 1 >/dev/null &&
    python3 bench/send.py "$GATEWAY_URL" "$WORK/sanity-failover.json" 1 >/dev/null &&
    python3 bench/send.py "$GATEWAY_URL" "$WORK/sanity-stream.json" 1 --stream >/dev/null ||
    die "a sanity request failed; see the logs below"

# --- what one more hop costs here, before any load -----------------------------------------
log "one more hop: loopback round trips between two processes"
timeout 120 python3 bench/hops.py >"$WORK/hops.json"

# --- memory with many streams open, first, so no load phase's heap is in the figure --------
log "opening $BENCH_STREAMS streams, $BENCH_STREAMS_WAVE at a time (upstream http2 = $BENCH_STREAMS_HTTP2)"
python3 bench/bodies.py chat 4k slow-stream --stream >"$WORK/slow-stream.json"
timeout 300 python3 bench/streams.py "$GW_ADDR" "$WORK/slow-stream.json" "$BENCH_STREAMS" \
    "$GW_PID" "$BENCH_STREAMS_WAVE" >"$WORK/streams.json"
if [[ $BENCH_STREAMS_ONLY == 1 ]]; then
    cat "$WORK/streams.json"
    exit 0
fi

# --- load phases --------------------------------------------------------------------------
RESULTS=$WORK/results.jsonl
: >"$RESULTS"

# run_phase SCENARIO TARGET URL BODY_FILE CONNECTIONS UPSTREAM_PID
run_phase() {
    local scenario=$1 name=$2 url=$3 body=$4 conns=$5 upstream=$6
    local threads=$((BENCH_THREADS < conns ? BENCH_THREADS : conns))
    local wrk=(wrk --timeout 5s -t"$threads" -c"$conns" -s bench/wrk.lua)
    local out="$WORK/wrk-${scenario// /_}-$name-c$conns.out"
    if ((BENCH_WARMUP > 0)); then
        BENCH_BODY_FILE=$body timeout $((BENCH_WARMUP + 30)) \
            "${wrk[@]}" -d"${BENCH_WARMUP}s" "$url" >"$out.warmup"
        settle "$GW_PID"
    fi
    local up_before sys_before cpu_before t_before gw_split_before px_split_before
    local up_after sys_after t_after gw_split_after px_split_after
    child_cpu_ms
    cpu_before=$CHILD_CPU_MS
    t_before=$EPOCHREALTIME
    sys_before=$(sys_busy_ticks)
    gw_split_before=$(cpu_split "$GW_PID")
    px_split_before=$(cpu_split "$PROXY_PID")
    up_before=$(cpu_ticks "$upstream")
    BENCH_BODY_FILE=$body timeout $((BENCH_SECONDS + 30)) \
        "${wrk[@]}" --latency -d"${BENCH_SECONDS}s" "$url" >"$out"
    settle "$GW_PID"
    gw_split_after=$(cpu_split "$GW_PID")
    px_split_after=$(cpu_split "$PROXY_PID")
    up_after=$(cpu_ticks "$upstream")
    sys_after=$(sys_busy_ticks)
    t_after=$EPOCHREALTIME
    child_cpu_ms
    local json
    json=$(sed -n 's/^WRK_RESULT //p' "$out")
    [[ -n $json ]] || die "wrk printed no result for $scenario $name c=$conns"
    # Wall time in µs, from $EPOCHREALTIME's "seconds.micros".
    local wall_us=$(((${t_after%.*} - ${t_before%.*}) * 1000000 + 10#${t_after#*.} - 10#${t_before#*.}))
    local gw_user gw_sys px_user px_sys
    read -r gw_user gw_sys < <(split_delta "$gw_split_before" "$gw_split_after")
    read -r px_user px_sys < <(split_delta "$px_split_before" "$px_split_after")
    printf '{"scenario":"%s","target":"%s","conns":%d,"threads":%d,"gateway_cpu_ticks":%d,"gateway_user_ticks":%d,"gateway_sys_ticks":%d,"proxy_user_ticks":%d,"proxy_sys_ticks":%d,"fake_cpu_ticks":%d,"machine_busy_ticks":%d,"wrk_cpu_ms":%d,"wall_us":%d,"wrk":%s}\n' \
        "$scenario" "$name" "$conns" "$threads" $((gw_user + gw_sys)) "$gw_user" "$gw_sys" \
        "$px_user" "$px_sys" $((up_after - up_before)) \
        $((sys_after - sys_before)) $((CHILD_CPU_MS - cpu_before)) "$wall_us" "$json" >>"$RESULTS"
    log "$scenario $name c=$conns: $(grep -E '^Requests/sec' "$out" || true)"
}

for size in $BENCH_SIZES; do
    python3 bench/bodies.py chat "$size" m >"$WORK/body-$size-direct.json"
    python3 bench/bodies.py chat "$size" bench >"$WORK/body-$size-gateway.json"
    through_proxy=0
    [[ " $BENCH_PROXY_SIZES " == *" $size "* ]] && through_proxy=1
    for c in $BENCH_CONCURRENCY; do
        run_phase "json $size" direct "$NGINX_JSON" "$WORK/body-$size-direct.json" "$c" "$NGINX_PID"
        run_phase "json $size" gateway "$GATEWAY_URL" "$WORK/body-$size-gateway.json" "$c" "$NGINX_PID"
        if ((through_proxy)); then
            run_phase "json $size" proxy "http://$PROXY_ADDR/json/v1/chat/completions" \
                "$WORK/body-$size-direct.json" "$c" "$NGINX_PID"
        fi
    done
done

# A 500-event stream: the gateway's CPU per forwarded event.
python3 bench/bodies.py chat 4k m --stream >"$WORK/stream-direct.json"
python3 bench/bodies.py chat 4k bench-stream --stream >"$WORK/stream-gateway.json"
for c in 1 16; do
    run_phase "stream $BENCH_EVENTS" direct "$NGINX_SSE" "$WORK/stream-direct.json" "$c" "$NGINX_PID"
    run_phase "stream $BENCH_EVENTS" gateway "$GATEWAY_URL" "$WORK/stream-gateway.json" "$c" "$NGINX_PID"
done

# Failover: the fakes, since nginx cannot fail on cue. Direct is the healthy fake alone.
python3 bench/bodies.py chat 4k failover >"$WORK/failover-gateway.json"
python3 bench/bodies.py chat 4k m >"$WORK/failover-direct.json"
for c in 1 16; do
    run_phase failover direct "http://$HEALTHY_ADDR/v1/chat/completions" "$WORK/failover-direct.json" "$c" "$HEALTHY_PID"
    run_phase failover gateway "$GATEWAY_URL" "$WORK/failover-gateway.json" "$c" "$HEALTHY_PID"
done

# --- streaming TTFB at concurrency 1 ------------------------------------------------------
log "streaming TTFB: $BENCH_TTFB_N sequential requests each way"
timeout 600 python3 bench/ttfb.py --direct "$NGINX_ADDR" --direct-path /sse/v1/chat/completions \
    --gateway "$GW_ADDR" --gateway-model bench-stream -n "$BENCH_TTFB_N" >"$WORK/ttfb.json"
log "streaming TTFB through the reference proxy: $BENCH_TTFB_N sequential requests each way"
timeout 600 python3 bench/ttfb.py --direct "$NGINX_ADDR" --direct-path /sse/v1/chat/completions \
    --gateway "$PROXY_ADDR" -n "$BENCH_TTFB_N" >"$WORK/ttfb-proxy.json"

# --- start to first answer ----------------------------------------------------------------
# A second gateway on its own port and store, started BENCH_STARTS times: the first on an
# empty store (migrations included), the rest on the store the first left.
BENCH_STARTS=${BENCH_STARTS:-6}
START_PORT=$(free_port)
sed -e "s|^listen = .*|listen = \"127.0.0.1:$START_PORT\"|" \
    -e "s|^url = \"sqlite://.*|url = \"sqlite://$WORK/startup.db\"|" \
    "$WORK/gateway.toml" >"$WORK/startup.toml"
# Its own 4 KB body: BENCH_SIZES may leave 4k out.
python3 bench/bodies.py chat 4k bench >"$WORK/startup-body.json"
log "start to first answer: $BENCH_STARTS starts"
env "${gateway_env[@]}" timeout 300 python3 bench/startup.py "$BIN" "$WORK/startup.toml" \
    "$START_PORT" "$WORK/startup-body.json" "$BENCH_STARTS" "$WORK/startup.db" >"$WORK/startup.json"

# --- memory after the load ------------------------------------------------------------------
kill -0 "$GW_PID" 2>/dev/null || die "the gateway died during the run"
RSS_KB=$(proc_status_kb "$GW_PID" VmRSS)
HWM_KB=$(proc_status_kb "$GW_PID" VmHWM)
GW_LOG_LINES=$(wc -l <"$WORK/gateway.err")

echo
python3 bench/report.py --results "$RESULTS" --ttfb "$WORK/ttfb.json" --streams "$WORK/streams.json" \
    --startup "$WORK/startup.json" --hops "$WORK/hops.json" --ttfb-proxy "$WORK/ttfb-proxy.json" \
    --rss-kb "$RSS_KB" --hwm-kb "$HWM_KB" --clk-tck "$CLK_TCK" --cpus "$CPUS" \
    --events "$BENCH_EVENTS" --seconds "$BENCH_SECONDS" --warmup "$BENCH_WARMUP" \
    ${BENCH_JSON:+--json "$BENCH_JSON"}
echo
echo "the gateway wrote $GW_LOG_LINES log line(s) at SWITCHYARD_LOG=${BENCH_GATEWAY_LOG:-its default}"
