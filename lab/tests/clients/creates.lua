-- wrk script for ticket creates (lab/tests/it/clients.rs). Settings come from the environment:
--   LAB_WRK_PATH   /tickets (keyed) or /unkeyed-tickets (needs `lab serve --faults`)
--   LAB_WRK_KEYS   "distinct": every request its own key; "fixed:N": N keys shared by every
--                  connection; "none": no Idempotency-Key header
--   LAB_WRK_TOKEN  the caller's bearer token
--   LAB_WRK_EACH   with one connection per thread (-t equal to -c): when a connection has had
--                  this many answers, it writes "lab-wrk-connection-answered" to stderr once
--                  (and goes on sending), so the caller can end the run on that event, once
--                  every connection has been answered, instead of at a deadline
-- At the end it prints one JSON line (prefixed "lab-wrk: ") with wrk's counts and the 2xx
-- answers counted by this script's response() in every thread.

local path = os.getenv("LAB_WRK_PATH") or "/tickets"
local keys = os.getenv("LAB_WRK_KEYS") or "distinct"
local token = os.getenv("LAB_WRK_TOKEN") or "token-a"
local each = tonumber(os.getenv("LAB_WRK_EACH") or "0")
local body = '{"title": "wrk", "priority": "normal"}'

local threads = {}

function setup(thread)
  thread:set("number", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  sent = 0
  answered_2xx = 0
  answered_other = 0
  fixed = tonumber(string.match(keys, "^fixed:(%d+)$"))
end

function request()
  sent = sent + 1
  local headers = {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
  }
  if fixed then
    headers["Idempotency-Key"] = "wrk-fixed-" .. ((sent + number) % fixed)
  elseif keys == "distinct" then
    headers["Idempotency-Key"] = "wrk-" .. number .. "-" .. sent
  end
  return wrk.format("POST", path, headers, body)
end

function response(status, headers, body)
  if status >= 200 and status < 300 then
    answered_2xx = answered_2xx + 1
  else
    answered_other = answered_other + 1
  end
  if answered_2xx + answered_other == each then
    -- stderr is unbuffered: the line leaves at once, whole.
    io.stderr:write("lab-wrk-connection-answered\n")
  end
end

function done(summary, latency, requests)
  local ok, other = 0, 0
  for _, thread in ipairs(threads) do
    ok = ok + thread:get("answered_2xx")
    other = other + thread:get("answered_other")
  end
  local e = summary.errors
  io.write(string.format(
    'lab-wrk: {"requests": %d, "answered_2xx": %d, "answered_other": %d, "connect": %d, '
      .. '"read": %d, "write": %d, "status": %d, "timeout": %d}\n',
    summary.requests, ok, other, e.connect, e.read, e.write, e.status, e.timeout))
end
