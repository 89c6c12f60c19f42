-- wrk: PUT a new ~200-byte document per request (unique id per thread and request).
local counter = 0
local thread_tag = ""
local body = '{"type":"reading","sensor":"s-0042","value":21.5,"unit":"C","tags":["a","b","c"],' ..
             '"note":"a document of roughly two hundred bytes for the single-document PUT benchmark"}'
local headers = { ["Content-Type"] = "application/json" }
-- -H headers (Authorization from run.sh's BENCH_AUTH) are kept: wrk.format ignores them when
-- given its own table.
local auth = os.getenv("BENCH_AUTH_HEADER")
if auth and auth ~= "" then headers["Authorization"] = auth end

math.randomseed(dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "urandom_seed.lua"))
function setup(thread)
  -- A fresh tag per run and thread: re-running against the same database does not conflict.
  thread:set("tag", tostring(os.time()) .. "-" .. tostring(math.random(1, 1e9)))
end

function init(args)
  thread_tag = tag
end

function request()
  counter = counter + 1
  return wrk.format("PUT", "/" .. db .. "/d-" .. thread_tag .. "-" .. counter, headers, body)
end

db = os.getenv("BENCH_DB") or "bench"
