-- wrk script: every write carries DEPTH requests for the URL's path (default 16), as
-- TechEmpower's plaintext test sends them. Usage: wrk -s bench/pipeline.lua URL -- 16
local depth = 16

function init(args)
  depth = tonumber(args[1]) or depth
  local one = wrk.format(nil, wrk.path)
  req = string.rep(one, depth)
end

function request()
  return req
end
