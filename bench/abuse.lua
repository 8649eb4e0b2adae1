-- wrk script for bench/abuse.py: a flood from many clients behind a load balancer. wrk connects from
-- 127.0.0.1, which nginx trusts as the balancer (NGINX_TRUSTED_PROXIES), and each request names a
-- client of a pool in X-Forwarded-For, from 198.18.0.0/15 (RFC 2544's benchmarking range; header
-- values only, no traffic goes there). Each request is a line of the requests file drawn at random:
-- "GET /path" or "POST /path body". A connection waits `delay` ms between requests, so the rate is
-- about connections * 1000 / delay. At the end, one JSON line with the answers counted by status
-- ("5xx": every 5xx but 503, the site's answer when a dependency does not answer, counted apart).
--   wrk -t2 -c8 -d20s -s bench/abuse.lua http://127.0.0.1:PORT -- requests.txt DELAY_MS POOL ORIGIN
local requests = {}
local threads = {}
local delay_ms, pool, origin = 0, 1000, ""

function setup(thread)
  threads[#threads + 1] = thread
end

function init(args)
  for line in io.lines(args[1]) do
    local method, path, body = line:match("^(%S+) (%S+) ?(.*)$")
    requests[#requests + 1] = {method = method, path = path, body = body ~= "" and body or nil}
  end
  delay_ms, pool, origin = tonumber(args[2]), tonumber(args[3]), args[4]
  math.randomseed(os.time() + tonumber(tostring(requests):match("0x(%x+)") or "0", 16) % 100000)
  s2xx, s3xx, s4xx, s429, s503, s5xx = 0, 0, 0, 0, 0, 0
end

function delay()
  return delay_ms
end

function request()
  local r = requests[math.random(#requests)]
  local client = math.random(pool) - 1
  local headers = {["X-Forwarded-For"] = string.format("198.%d.%d.%d", 18 + math.floor(client / 65536) % 2,
                                                       math.floor(client / 256) % 256, client % 256)}
  if r.method == "POST" then
    headers["Origin"] = origin
    headers["Content-Type"] = "application/x-www-form-urlencoded"
  end
  return wrk.format(r.method, r.path, headers, r.body)
end

function response(status, headers, body)
  if status == 503 then s503 = s503 + 1
  elseif status >= 500 then s5xx = s5xx + 1
  elseif status == 429 then s429 = s429 + 1
  elseif status >= 400 then s4xx = s4xx + 1
  elseif status >= 300 then s3xx = s3xx + 1
  else s2xx = s2xx + 1 end
end

function done(summary, latency, requests)
  local counts = {s2xx = 0, s3xx = 0, s4xx = 0, s429 = 0, s503 = 0, s5xx = 0}
  for _, thread in ipairs(threads) do
    for name, _ in pairs(counts) do
      counts[name] = counts[name] + thread:get(name)
    end
  end
  local errors = summary.errors
  io.write(string.format(
    'RESULT {"requests": %d, "duration_us": %d, "connect_errors": %d, "read_errors": %d, "write_errors": %d, '
      .. '"timeouts": %d, "2xx": %d, "3xx": %d, "4xx": %d, "429": %d, "503": %d, "5xx": %d, "p99_us": %d}\n',
    summary.requests, summary.duration, errors.connect, errors.read, errors.write, errors.timeout,
    counts.s2xx, counts.s3xx, counts.s4xx, counts.s429, counts.s503, counts.s5xx, latency:percentile(99)))
end
