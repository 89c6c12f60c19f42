-- wrk: POST /{db} of a new ~200-byte document per request, with an Idempotency-Key.
-- IDEM_MODE: "none" (no key: the plain POST, for comparison), "unique" (a new key per request),
-- "retry" (every second request repeats one sent 100 requests earlier by the same wrk thread, key
-- and body: a replay; the one just before may still be in flight on another connection, which
-- would be answered 409).
local counter = 0
local thread_tag = ""
local body = '{"type":"reading","sensor":"s-0042","value":21.5,"unit":"C","tags":["a","b","c"],' ..
             '"note":"a document of roughly two hundred bytes for the idempotent POST benchmark"}'
local mode = os.getenv("IDEM_MODE") or "unique"
local auth = os.getenv("BENCH_AUTH_HEADER")

math.randomseed(os.time())
function setup(thread)
  thread:set("tag", tostring(os.time()) .. "-" .. tostring(math.random(1, 1e9)))
end

function init(args)
  thread_tag = tag
end

function request()
  counter = counter + 1
  local headers = { ["Content-Type"] = "application/json" }
  if auth and auth ~= "" then headers["Authorization"] = auth end
  if mode ~= "none" then
    local n = counter
    if mode == "retry" and counter % 2 == 0 and counter > 100 then n = counter - 99 end
    headers["Idempotency-Key"] = "k-" .. thread_tag .. "-" .. n
  end
  return wrk.format("POST", "/" .. db, headers, body)
end

db = os.getenv("BENCH_DB") or "bench"
