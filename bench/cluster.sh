#!/usr/bin/env bash
# Switchyard benchmark: the gateway's CPU per request in cluster mode (PostgreSQL store, Redis
# limits, shared breakers) against embedded mode (SQLite store, in-memory limits), in one run,
# in front of one fake provider, under the same load.
#
#   bash bench/cluster.sh                       # from the repository root
#   BENCH_SECONDS=5 BENCH_ROUNDS=1 bash bench/cluster.sh
#
# Needs the local PostgreSQL (127.0.0.1:5432, trust auth, user postgres: a database of the
# run's own is created and dropped) and Redis (127.0.0.1:6379: a key prefix of the run's own,
# its keys deleted afterwards). See bench/README.md. Figures are reported, never asserted.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BENCH_SECONDS=${BENCH_SECONDS:-10}    # measured seconds per phase
BENCH_WARMUP=${BENCH_WARMUP:-2}       # unmeasured warm-up seconds before each phase
BENCH_ROUNDS=${BENCH_ROUNDS:-2}       # embedded then cluster, this many times (drift hits both)
BENCH_CONNS=${BENCH_CONNS:-16}        # wrk connections
BENCH_PG=${BENCH_PG:-postgres://postgres@127.0.0.1:5432}
BENCH_REDIS=${BENCH_REDIS:-redis://127.0.0.1:6379}

log() { printf '[cluster-bench] %s\n' "$*" >&2; }
die() { printf '[cluster-bench] error: %s\n' "$*" >&2; exit 1; }

for var in BENCH_SECONDS BENCH_WARMUP BENCH_ROUNDS BENCH_CONNS; do
    [[ ${!var} =~ ^[0-9]+$ ]] || die "$var must be a whole number, not '${!var}'"
done
((BENCH_SECONDS > 0 && BENCH_ROUNDS > 0 && BENCH_CONNS > 0)) || die "seconds, rounds and conns must be at least 1"
for tool in wrk python3 psql redis-cli cargo; do
    command -v "$tool" >/dev/null || die "$tool is required (bench/run.sh installs wrk; apt-get install postgresql-client redis-tools)"
done

if [[ -n ${BENCH_BIN:-} ]]; then
    BIN=$BENCH_BIN
else
    log "building the release binary (cargo build --release)"
    cargo build --release --bin switchyard >&2
    BIN="${CARGO_TARGET_DIR:-target}/release/switchyard"
fi
[[ -x $BIN ]] || die "no binary at $BIN"

CLK_TCK=$(getconf CLK_TCK)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-cluster-bench.XXXXXX")
RUN_ID=$(python3 -c 'import uuid; print(uuid.uuid4().hex[:12])')
DB=switchyard_bench_$RUN_ID
PREFIX=switchyard-bench-$RUN_ID
DB_MADE=0

PIDS=()
cleanup() {
    local status=$?
    local pid i
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if ((DB_MADE)); then
        psql -q "$BENCH_PG/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    fi
    redis-cli -u "$BENCH_REDIS" --scan --pattern "$PREFIX*" 2>/dev/null |
        xargs -r redis-cli -u "$BENCH_REDIS" del >/dev/null 2>&1 || true
    if ((status != 0)); then
        local f
        for f in "$WORK"/*.err; do
            [[ -s $f ]] || continue
            printf '[cluster-bench] --- last lines of %s ---\n' "$f" >&2
            tail -n 20 "$f" >&2
        done
    fi
    rm -rf "$WORK"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# utime + stime of a whole process (all its threads), in clock ticks, from /proc/<pid>/stat.
cpu_ticks() {
    local stat
    stat=$(<"/proc/$1/stat")
    stat=${stat##*) }
    local -a f
    read -r -a f <<<"$stat"
    echo $((f[11] + f[12]))
}

# Waits (bounded) until a gateway's /readyz answers 200; fails early if it exits.
wait_ready() {
    local addr=$1 pid=$2 i
    for ((i = 0; i < 600; i++)); do
        kill -0 "$pid" 2>/dev/null || die "gateway $pid exited before it was ready"
        if python3 - "http://$addr/readyz" 2>/dev/null <<'PY'; then return 0; fi
import sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
sys.exit(0 if opener.open(sys.argv[1], timeout=2).status == 200 else 1)
PY
        sleep 0.1
    done
    die "gateway on $addr not ready after 60 s"
}

# --- fake provider, database ----------------------------------------------------------------
"$BIN" fake-upstream --listen 127.0.0.1:0 --name bench >"$WORK/fake.out" 2>"$WORK/fake.err" &
FAKE_PID=$!
PIDS+=("$FAKE_PID")
for ((i = 0; i < 300; i++)); do
    grep -q 'fake upstream' "$WORK/fake.out" 2>/dev/null && break
    kill -0 "$FAKE_PID" 2>/dev/null || die "the fake exited"
    sleep 0.1
done
FAKE_ADDR=$(grep -o 'http://[0-9.]*:[0-9]*/v1' "$WORK/fake.out" | head -n 1)
[[ -n $FAKE_ADDR ]] || die "cannot read the fake's address"

psql -q "$BENCH_PG/postgres" -c "CREATE DATABASE $DB" >/dev/null || die "cannot create database $DB at $BENCH_PG"
DB_MADE=1
MASTER_KEY=$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')

# --- the two gateways: identical but for the store and the limits' backend --------------------
# Every request is checked against a limit (the anonymous caller's role), so both modes do the
# limiter's work; the limit is far above what the run sends.
common() {
    cat <<EOF
[auth]
required = false
default_role = "bench"

[[roles]]
name = "bench"
requests_per_minute = 1000000000

[[providers]]
name = "up"
kind = "openai"
base_url = "$FAKE_ADDR"
key_required = false

[[routes]]
name = "bench"
steps = [{ provider = "up", model = "m" }]
EOF
}

start_gateway() { # NAME STORE_AND_LIMITS -> sets ADDR_<NAME>, PID_<NAME>
    local name=$1 sections=$2 port
    port=$(free_port)
    { printf '[server]\nlisten = "127.0.0.1:%s"\n%s\n' "$port" "$sections"; common; } >"$WORK/$name.toml"
    SWITCHYARD_LOG=warn SWITCHYARD_MASTER_KEY=$MASTER_KEY NO_COLOR=1 \
        "$BIN" serve --config "$WORK/$name.toml" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    local pid=$!
    PIDS+=("$pid")
    wait_ready "127.0.0.1:$port" "$pid"
    printf -v "ADDR_$name" '%s' "127.0.0.1:$port"
    printf -v "PID_$name" '%s' "$pid"
    log "$name gateway (pid $pid) on 127.0.0.1:$port"
}

start_gateway embedded "$(printf '[store]\nurl = "sqlite://%s/embedded.db"\n[log]\nspill_path = "%s/embedded-spill"\n' "$WORK" "$WORK")"
start_gateway cluster "$(printf '[store]\nurl = "%s/%s"\n[limits]\nbackend = "redis"\nredis_url = "%s"\nkey_prefix = "%s"\n[log]\nspill_path = "%s/cluster-spill"\n' \
    "$BENCH_PG" "$DB" "$BENCH_REDIS" "$PREFIX" "$WORK")"

BODY='{"model":"bench","messages":[{"role":"user","content":"Hello"}]}'
RESULTS=$WORK/results.tsv
: >"$RESULTS"

run_phase() { # NAME ROUND
    local name=$1 round=$2
    local addr_var=ADDR_$name pid_var=PID_$name
    local url="http://${!addr_var}/v1/chat/completions" pid=${!pid_var}
    local wrk=(wrk --timeout 5s -t1 -c"$BENCH_CONNS" -s bench/wrk.lua)
    if ((BENCH_WARMUP > 0)); then
        BENCH_BODY=$BODY timeout $((BENCH_WARMUP + 30)) "${wrk[@]}" -d"${BENCH_WARMUP}s" "$url" >/dev/null
    fi
    local before after json
    before=$(cpu_ticks "$pid")
    BENCH_BODY=$BODY timeout $((BENCH_SECONDS + 30)) "${wrk[@]}" -d"${BENCH_SECONDS}s" "$url" >"$WORK/wrk.out"
    after=$(cpu_ticks "$pid")
    json=$(sed -n 's/^WRK_RESULT //p' "$WORK/wrk.out")
    [[ -n $json ]] || die "wrk printed no result for $name"
    printf '%s\t%s\t%s\t%s\n' "$name" "$round" $((after - before)) "$json" >>"$RESULTS"
}

for ((round = 1; round <= BENCH_ROUNDS; round++)); do
    run_phase embedded "$round"
    run_phase cluster "$round"
    log "round $round of $BENCH_ROUNDS done"
done
kill -0 "$PID_embedded" && kill -0 "$PID_cluster" || die "a gateway died during the run"

python3 - "$RESULTS" "$CLK_TCK" "$BENCH_SECONDS" "$BENCH_CONNS" <<'PY'
import json, sys
path, clk_tck, seconds, conns = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
totals = {}
print(f"gateway CPU per request, {conns} connections, {seconds} s phases (utime+stime from /proc/<pid>/stat)")
print(f"{'mode':<9} {'round':>5} {'requests':>9} {'req/s':>8} {'p50 ms':>7} {'CPU µs/req':>10}")
for line in open(path):
    name, rnd, ticks, raw = line.rstrip("\n").split("\t", 3)
    w = json.loads(raw)
    errors = w["err_connect"] + w["err_read"] + w["err_write"] + w["err_status"] + w["err_timeout"]
    if errors:
        sys.exit(f"{name} round {rnd}: {errors} errors; the figures would not be comparable")
    cpu_us = int(ticks) * 1_000_000 / clk_tck
    t = totals.setdefault(name, [0.0, 0])
    t[0] += cpu_us
    t[1] += w["requests"]
    print(f"{name:<9} {rnd:>5} {w['requests']:>9} {w['requests'] * 1e6 / w['duration_us']:>8.0f} "
          f"{w['lat_p50_us'] / 1000:>7.2f} {cpu_us / w['requests']:>10.1f}")
per = {name: cpu / n for name, (cpu, n) in totals.items()}
print(f"all rounds: embedded {per['embedded']:.1f} µs, cluster {per['cluster']:.1f} µs CPU per request; "
      f"cluster / embedded = {per['cluster'] / per['embedded']:.2f}")
PY
