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
-- Each wrk thread its own random sequence (seeded_random.lua, beside this script).
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "seeded_random.lua")

function request()
  return wrk.format("PUT", string.format(fmt, db, math.random(0, n - 1)), headers, body)
end
