-- wrk script for the Switchyard benchmark: POSTs one chat completion body per request and,
-- when the run ends, prints a single machine-readable line (read by bench/run.sh).
--
-- The body comes from the environment variable BENCH_BODY so the same script drives both
-- the fake provider (model "m") and the gateway (model "bench").

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = os.getenv("BENCH_BODY")
  or '{"model":"bench","messages":[{"role":"user","content":"Hello"}]}'

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
