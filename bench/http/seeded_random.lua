-- Loaded by the wrk scripts that draw ids with math.random (get_doc.lua, put_conflict.lua): each
-- wrk thread draws from its own sequence. Unseeded, every thread's Lua state would repeat the
-- same ids in step, and the second request for an id would find its blocks in the cache the
-- first one just filled. Defines wrk's setup() and init().
math.randomseed(dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "urandom_seed.lua"))
function setup(thread)
  thread:set("seed", math.random(1, 2147483646))
end

function init(args)
  math.randomseed(seed)
end
