-- wrk: a random seed from /dev/urandom (os.time() when it cannot be read), so that wrk processes
-- started in the same second (nodes.py runs one per node) draw different sequences. Used as
-- math.randomseed(dofile(<this folder> .. "urandom_seed.lua")).
local f = io.open("/dev/urandom", "rb")
if not f then return os.time() end
local b = f:read(4)
f:close()
return ((b:byte(1) * 256 + b:byte(2)) * 256 + b:byte(3)) * 256 + b:byte(4)
