-- wrk: GET one of the preloaded documents d000000 .. d(N-1), chosen at random.
local n = tonumber(os.getenv("BENCH_DOCS") or "1000")
local db = os.getenv("BENCH_DB") or "bench"
function request()
  return wrk.format("GET", string.format("/%s/d%06d", db, math.random(0, n - 1)))
end
