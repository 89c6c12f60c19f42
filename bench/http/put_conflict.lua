-- wrk: PUT one of the preloaded documents d000000 .. d(N-1) without its revision, chosen at
-- random: every request is refused with 409 conflict (a client writing without the current _rev,
-- as optimistic concurrency makes many do).
local n = tonumber(os.getenv("BENCH_DOCS") or "1000")
local db = os.getenv("BENCH_DB") or "bench"
local fmt = "/%s/" .. (os.getenv("BENCH_ID_FORMAT") or "d%06d")
local body = '{"type":"reading","sensor":"s-0042","value":21.5,"unit":"C"}'
local headers = { ["Content-Type"] = "application/json" }
local auth = os.getenv("BENCH_AUTH_HEADER")
if auth and auth ~= "" then headers["Authorization"] = auth end
-- Each wrk thread draws from its own sequence: unseeded, every thread's Lua state would repeat
-- the same ids in step, and the second request for an id would find its blocks in the cache
-- the first one just filled.
math.randomseed(os.time())
function setup(thread)
  thread:set("seed", math.random(1, 2147483646))
end

function init(args)
  math.randomseed(seed)
end

function request()
  return wrk.format("PUT", string.format(fmt, db, math.random(0, n - 1)), headers, body)
end
