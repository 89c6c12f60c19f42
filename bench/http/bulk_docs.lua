-- wrk: POST _bulk_docs with 1,000 new ~200-byte documents (server-generated ids) per request.
local db = os.getenv("BENCH_DB") or "bench"
local docs = {}
for i = 1, 1000 do
  docs[i] = '{"type":"reading","sensor":"s-0042","value":' .. i ..
            ',"unit":"C","tags":["a","b","c"],"note":"bulk benchmark document of about two hundred bytes"}'
end
local body = '{"docs":[' .. table.concat(docs, ",") .. ']}'
local headers = { ["Content-Type"] = "application/json" }
-- -H headers (Authorization from run.sh's BENCH_AUTH) are kept: wrk.format ignores them when
-- given its own table.
local auth = os.getenv("BENCH_AUTH_HEADER")
if auth and auth ~= "" then headers["Authorization"] = auth end
function request()
  return wrk.format("POST", "/" .. db .. "/_bulk_docs", headers, body)
end
