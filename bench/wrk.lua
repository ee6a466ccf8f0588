-- wrk script for the Switchyard benchmark: POSTs one chat completion body per request and,
-- when the run ends, prints a single machine-readable line (read by bench/run.sh).
--
-- The body is read from the file named by BENCH_BODY_FILE (bench/bodies.py writes them; a
-- 128 KB body is too long for an environment variable), else taken from BENCH_BODY, so the
-- same script drives the upstream (model "m") and the gateway (a route name).

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local body_file = os.getenv("BENCH_BODY_FILE")
if body_file then
  local f = assert(io.open(body_file, "rb"))
  wrk.body = f:read("*a")
  f:close()
else
  wrk.body = os.getenv("BENCH_BODY")
    or '{"model":"bench","messages":[{"role":"user","content":"Hello"}]}'
end

-- Latencies are in microseconds. `summary.errors.status` counts responses with status > 399.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,'
      .. '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,'
      .. '"lat_mean_us":%.1f,"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,"lat_max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max))
end
