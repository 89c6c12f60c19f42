-- wrk: GET one of the preloaded documents d000000 .. d(N-1), chosen at random.
-- BENCH_ID_FORMAT: the ids' format (default d%06d; scale.sh's are d%08d).
local n = tonumber(os.getenv("BENCH_DOCS") or "1000")
local db = os.getenv("BENCH_DB") or "bench"
local fmt = "/%s/" .. (os.getenv("BENCH_ID_FORMAT") or "d%06d")
-- Each wrk thread its own random sequence (seeded_random.lua, beside this script).
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "seeded_random.lua")

function request()
  return wrk.format("GET", string.format(fmt, db, math.random(0, n - 1)))
end
