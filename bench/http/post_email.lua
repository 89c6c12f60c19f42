-- wrk: POST /{db} of a new ~200-byte document with an email no other request uses (a unique
-- index never refuses it): the write cost of a unique index on "email".
local counter = 0
local thread_tag = ""
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
  local body = '{"type":"user","email":"u-' .. thread_tag .. '-' .. counter ..
               '@example.com","name":"a user document of roughly two hundred bytes","tags":["a","b"]}'
  return wrk.format("POST", "/" .. os.getenv("BENCH_DB"), headers, body)
end
