-- wrk script: POST /v1/jobs with a small valid job spec, distinct names.
local counter = 0
request = function()
  counter = counter + 1
  local body = '{"name":"bench-' .. counter .. '","data":{"train":"data/bench.bin"}}'
  return wrk.format("POST", "/v1/jobs", {["Content-Type"] = "application/json"}, body)
end
