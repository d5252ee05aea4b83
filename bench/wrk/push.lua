-- wrk script for scripts/wrk-push.sh: POST /api/v1/push with ITEMS items
-- per request (environment; default 100), each to the next of PARTITIONS
-- partitions p0..p<PARTITIONS-1> of queue QUEUE (default wrk), round-robin
-- per connection thread, with a JSON object payload of about PAYLOAD bytes
-- (default 256) and no transactionId (the broker mints the ids, so no two
-- items are duplicates of each other). It counts the items' verdicts in
-- the answers and prints them in done() as one line:
--   wrk-push: queued=Q buffered=B duplicate=D failed=F bad_answers=N
-- (bad_answers: answers other than 201, or without an item verdict).
local items = tonumber(os.getenv("ITEMS") or "100")
local partitions = tonumber(os.getenv("PARTITIONS") or "10")
local queue = os.getenv("QUEUE") or "wrk"
local payload = tonumber(os.getenv("PAYLOAD") or "256")
-- {"d":"xxx…"} is payload bytes long.
local pad = string.rep("x", math.max(payload - 8, 1))

local threads = {}
function setup(thread)
  thread:set("first", #threads) -- spreads the threads' partitions apart
  table.insert(threads, thread)
end

-- Per thread (each thread runs this file in a Lua state of its own):
-- the next partition, and the verdicts counted.
next_part = 0
queued, buffered, duplicate, failed, bad = 0, 0, 0, 0, 0

function init(args)
  next_part = first or 0
end

function request()
  local parts = {}
  for i = 1, items do
    parts[i] = '{"queue":"' .. queue .. '","partition":"p' .. (next_part % partitions) ..
      '","payload":{"d":"' .. pad .. '"}}'
    next_part = next_part + 1
  end
  return wrk.format("POST", "/api/v1/push", {["Content-Type"] = "application/json"},
    '{"items":[' .. table.concat(parts, ",") .. ']}')
end

function response(status, headers, body)
  if status ~= 201 then
    bad = bad + 1
    return
  end
  local _, q = string.gsub(body, '"status":"queued"', "")
  local _, b = string.gsub(body, '"status":"buffered"', "")
  local _, d = string.gsub(body, '"status":"duplicate"', "")
  local _, f = string.gsub(body, '"status":"failed"', "")
  if q + b + d + f == 0 then
    bad = bad + 1
  end
  queued, buffered, duplicate, failed = queued + q, buffered + b, duplicate + d, failed + f
end

function done(summary, latency, requests)
  local q, b, d, f, n = 0, 0, 0, 0, 0
  for _, t in ipairs(threads) do
    q = q + t:get("queued")
    b = b + t:get("buffered")
    d = d + t:get("duplicate")
    f = f + t:get("failed")
    n = n + t:get("bad")
  end
  io.write(string.format("wrk-push: queued=%d buffered=%d duplicate=%d failed=%d bad_answers=%d\n", q, b, d, f, n))
end
