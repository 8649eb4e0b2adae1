-- wrk script for bench/load.py: each request is a path drawn uniformly from the file named by the
-- first script argument (one path a line); at the end, one JSON line with the numbers load.py reads.
--   wrk -t2 -c16 -d60s -s bench/load.lua http://127.0.0.1:PORT -- paths.txt
local paths = {}

function init(args)
  for line in io.lines(args[1]) do
    paths[#paths + 1] = line
  end
  math.randomseed(os.time() + tonumber(tostring(paths):match("0x(%x+)") or "0", 16) % 100000)
end

function request()
  return wrk.format("GET", paths[math.random(#paths)])
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    'RESULT {"requests": %d, "duration_us": %d, "bytes": %d, "status_errors": %d, "connect_errors": %d, '
      .. '"read_errors": %d, "write_errors": %d, "timeouts": %d, "p50_us": %d, "p95_us": %d, "p99_us": %d, '
      .. '"max_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration, summary.bytes, errors.status, errors.connect, errors.read, errors.write,
    errors.timeout, latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max,
    latency.mean))
end
