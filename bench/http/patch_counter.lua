-- wrk: PATCH one document with a JSON Patch increment per request (hot documents).
-- BENCH_DB / BENCH_DOC name the document; it must exist with a number "n".
local headers = { ["Content-Type"] = "application/json-patch+json" }
local auth = os.getenv("BENCH_AUTH_HEADER")
if auth and auth ~= "" then headers["Authorization"] = auth end
local body = '[{"op":"increment","path":"/n","value":1}]'
local target = "/" .. (os.getenv("BENCH_DB") or "bench") .. "/" .. (os.getenv("BENCH_DOC") or "counter")

function request()
  return wrk.format("PATCH", target, headers, body)
end
