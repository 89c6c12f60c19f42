-- wrk: call an update handler on one document per request (hot documents through JavaScript).
-- BENCH_DB / BENCH_DOC name the document, BENCH_UPDATE the handler ("_design/u/_update/inc");
-- the document must exist.
local headers = {}
local auth = os.getenv("BENCH_AUTH_HEADER")
if auth and auth ~= "" then headers["Authorization"] = auth end
local target = "/" .. (os.getenv("BENCH_DB") or "bench") .. "/"
    .. (os.getenv("BENCH_UPDATE") or "_design/u/_update/inc") .. "/"
    .. (os.getenv("BENCH_DOC") or "counter")

function request()
  return wrk.format("POST", target, headers, "")
end
