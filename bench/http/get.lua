-- wrk script: GET /v1/jobs/{id} over the ids listed in the file named by
-- the IDS environment variable (one per line), round robin, with the token
-- of RM_TOKEN (run.sh: the daemon's admin.token).
local ids = {}
for line in io.lines(os.getenv("IDS")) do ids[#ids + 1] = line end
local i = 0
local headers = {["Authorization"] = "Bearer " .. (os.getenv("RM_TOKEN") or "")}
request = function()
  i = i % #ids + 1
  return wrk.format("GET", "/v1/jobs/" .. ids[i], headers)
end
