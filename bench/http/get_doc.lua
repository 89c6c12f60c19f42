-- wrk: GET one of the preloaded documents d000000 .. d(N-1), chosen at random.
-- BENCH_ID_FORMAT: the ids' format (default d%06d; scale.sh's are d%08d).
local n = tonumber(os.getenv("BENCH_DOCS") or "1000")
local db = os.getenv("BENCH_DB") or "bench"
local fmt = "/%s/" .. (os.getenv("BENCH_ID_FORMAT") or "d%06d")
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
  return wrk.format("GET", string.format(fmt, db, math.random(0, n - 1)))
end
