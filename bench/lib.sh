# Shared by bench/run.sh and bench/instructions.sh: tools, nginx as the upstream, processes.
# Sourced, not run. Expects WORK (a temporary directory) and the PIDS array to exist.

log() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }

# Installs Debian package $2 when command $1 is missing (through sudo when not root).
need() {
    local command=$1 package=$2
    command -v "$command" >/dev/null && return 0
    log "$command not found; installing $package from the distribution's packages"
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || die "$command is missing and we are not root; install $package"
        sudo=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! "${sudo[@]}" apt-get install -y "$package" >&2; then
        "${sudo[@]}" apt-get update >&2
        "${sudo[@]}" apt-get install -y "$package" >&2
    fi
    command -v "$command" >/dev/null || die "could not install $package"
}

# nginx lives in /usr/sbin, which a non-root PATH may lack.
find_nginx() {
    PATH=$PATH:/usr/sbin need nginx nginx-light
    NGINX=$(PATH=$PATH:/usr/sbin command -v nginx)
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

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

# Waits up to $3 seconds until 127.0.0.1:$1 accepts connections; fails early if $2 exits.
wait_for_port() {
    local port=$1 pid=$2 limit=$3
    local deadline=$((SECONDS + limit))
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || die "process $pid exited before listening on $port"
        ((SECONDS < deadline)) || die "nothing listening on port $port after ${limit}s"
        sleep 0.05
    done
}

# The start of an nginx config whose files are under $WORK/$1, up to the http block's
# settings: one process that serves, so its CPU time is all in one pid (a master would show
# none), no access log, keep-alive without end. The caller adds its servers and the
# closing brace.
nginx_preamble() {
    local dir=$WORK/$1
    cat <<NGINX
master_process off;
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    client_max_body_size 4m;
    client_body_buffer_size 1m;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    tcp_nodelay on;
NGINX
}

# Starts nginx on a free port as a fake provider that costs next to nothing per request:
#   /json/v1/chat/completions  a whole OpenAI completion (a static file, from bench/bodies.py)
#   /sse/v1/chat/completions   a stream of $1 content events, then usage and [DONE]
# Sets NGINX_ADDR and NGINX_PID.
start_nginx() {
    local events=$1
    find_nginx
    NGINX_PORT=$(free_port)
    NGINX_ADDR=127.0.0.1:$NGINX_PORT
    mkdir -p "$WORK/nginx/tmp" "$WORK/nginx/www"
    # Started as root, nginx's workers run as another user: they must reach the files.
    chmod 711 "$WORK" "$WORK/nginx"
    chmod 755 "$WORK/nginx/www"
    chmod 1777 "$WORK/nginx/tmp"
    python3 bench/bodies.py sse "$events" >"$WORK/nginx/www/stream.sse"
    python3 bench/bodies.py completion >"$WORK/nginx/www/completion.json"
    {
        nginx_preamble nginx
        cat <<NGINX
    server {
        listen $NGINX_ADDR backlog=4096;
        # A static file answers GET only: the POST's 405 becomes the file, as a 200.
        location = /json/v1/chat/completions {
            error_page 405 =200 /completion.json;
            return 405;
        }
        location = /sse/v1/chat/completions {
            error_page 405 =200 /stream.sse;
            return 405;
        }
        location = /completion.json {
            internal;
            root $WORK/nginx/www;
            default_type application/json;
        }
        location = /stream.sse {
            internal;
            root $WORK/nginx/www;
            default_type text/event-stream;
        }
        # An OTLP/HTTP endpoint that takes every export (INSTR_TRACED=1).
        location = /otlp/v1/traces {
            return 200;
        }
    }
}
NGINX
    } >"$WORK/nginx/nginx.conf"
    "$NGINX" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log" \
        >"$WORK/nginx.out" 2>"$WORK/nginx.err" &
    NGINX_PID=$!
    PIDS+=("$NGINX_PID")
    wait_for_port "$NGINX_PORT" "$NGINX_PID" 30
    log "nginx (pid $NGINX_PID) on $NGINX_ADDR"
}

# Starts a second nginx on a free port as a reverse proxy to the upstream nginx, with a
# keep-alive pool: the cheapest well-known proxy, as a yardstick for what one more hop costs
# on this machine when the proxy does next to nothing (no JSON, no log, no routing). Answers
# are not buffered, so a stream's events pass as they come, as through the gateway.
#   /v1/chat/completions  the upstream's stream (for bench/ttfb.py, which posts there)
#   anything else         the same path on the upstream (/json/v1/chat/completions)
# Expects NGINX_ADDR; sets PROXY_ADDR and PROXY_PID.
start_reference_proxy() {
    local port
    port=$(free_port)
    PROXY_ADDR=127.0.0.1:$port
    mkdir -p "$WORK/proxy/tmp"
    chmod 711 "$WORK/proxy"
    chmod 1777 "$WORK/proxy/tmp"
    local pass='proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off;'
    {
        nginx_preamble proxy
        cat <<NGINX
    upstream upstream_nginx {
        server $NGINX_ADDR;
        keepalive 1024;
        keepalive_requests 100000000;
    }
    server {
        listen $PROXY_ADDR backlog=4096;
        location = /v1/chat/completions {
            proxy_pass http://upstream_nginx/sse/v1/chat/completions;
            $pass
        }
        location / {
            proxy_pass http://upstream_nginx;
            $pass
        }
    }
}
NGINX
    } >"$WORK/proxy/nginx.conf"
    # PROXY_LAUNCHER, when set, runs it under another program (callgrind, in instructions.sh).
    ${PROXY_LAUNCHER[@]+"${PROXY_LAUNCHER[@]}"} "$NGINX" -c "$WORK/proxy/nginx.conf" -e "$WORK/proxy/error.log" \
        >"$WORK/proxy.out" 2>"$WORK/proxy.err" &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    wait_for_port "$port" "$PROXY_PID" 120
    log "reference proxy: nginx (pid $PROXY_PID) on $PROXY_ADDR, in front of $NGINX_ADDR"
}

# Writes the gateway's config to $WORK/gateway.toml: port $1, providers on nginx (`json`,
# `sse`) and, when $2 and $3 name fake providers' addresses, a failover pair.
# Routes: `bench` (nginx JSON), `bench-stream` (nginx SSE), `failover` (fake 500 → fake ok).
write_gateway_config() {
    local port=$1 failing=${2:-} healthy=${3:-}
    cat >"$WORK/gateway.toml" <<TOML
[server]
listen = "127.0.0.1:$port"

[auth]
required = false

# A file, as in a deployment (the request log is written to it), but in the temporary
# directory: the default would create switchyard.db and its key file in the repository.
[store]
url = "sqlite://$WORK/switchyard.db"

[[providers]]
name = "json"
kind = "openai"
base_url = "http://$NGINX_ADDR/json/v1"
key_required = false

[[providers]]
name = "sse"
kind = "openai"
base_url = "http://$NGINX_ADDR/sse/v1"
key_required = false

[[routes]]
name = "bench"
steps = [{ provider = "json", model = "m" }]

[[routes]]
name = "bench-stream"
steps = [{ provider = "sse", model = "m" }]

# The same upstream as bench, with its answers kept: every request after the first hits.
[[routes]]
name = "bench-cached"
steps = [{ provider = "json", model = "m" }]
cache = { ttl = "1h", scope = "shared" }
TOML
    if [[ ${INSTR_TRACED:-0} == 1 ]]; then
        cat >>"$WORK/gateway.toml" <<TOML

# Every request traced, its spans exported to nginx (which takes them all).
[otel]
endpoint = "http://$NGINX_ADDR/otlp"
sample_ratio = 1.0
TOML
    fi
    if [[ -n $failing ]]; then
        cat >>"$WORK/gateway.toml" <<TOML

[[providers]]
name = "failing"
kind = "openai"
base_url = "http://$failing/v1"
key_required = false

[[providers]]
name = "healthy"
kind = "openai"
base_url = "http://$healthy/v1"
key_required = false

[[routes]]
name = "failover"
steps = [{ provider = "failing", model = "m" }, { provider = "healthy", model = "m" }]
TOML
    fi
}

# A throwaway master key for the store's vault, so none is generated beside the database.
master_key() {
    python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())'
}
