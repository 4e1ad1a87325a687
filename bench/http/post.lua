-- wrk script: POST /v1/jobs with a small valid job spec, distinct names,
-- with the token of RM_TOKEN (run.sh: the daemon's admin.token).
local counter = 0
local auth = "Bearer " .. (os.getenv("RM_TOKEN") or "")
request = function()
  counter = counter + 1
  local body = '{"name":"bench-' .. counter .. '","data":{"train":"data/bench.bin"}}'
  return wrk.format("POST", "/v1/jobs", {["Content-Type"] = "application/json", ["Authorization"] = auth}, body)
end
