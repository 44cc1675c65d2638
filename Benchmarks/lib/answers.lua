-- What wrk's answers were: accepted (2xx) counted, the rest by status and error code ("429 quota-exceeded").
-- Each thread counts its own; tally() sums them in done().
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  accepted = 0
  refused = {}
end
function response(status, headers, body)
  if status >= 200 and status < 300 then
    accepted = accepted + 1
  else
    local code = string.match(body or "", '"code"%s*:%s*"([^"]+)"') or "-"
    local key = status .. " " .. code
    refused[key] = (refused[key] or 0) + 1
  end
end
-- The accepted count, and the refused as "none" or "N × 429 quota-exceeded, …".
function tally()
  local total, all = 0, {}
  for _, t in ipairs(threads) do
    total = total + t:get("accepted")
    for k, n in pairs(t:get("refused")) do all[k] = (all[k] or 0) + n end
  end
  local parts = {}
  for k, n in pairs(all) do table.insert(parts, n .. " × " .. k) end
  table.sort(parts)
  return total, (#parts == 0 and "none" or table.concat(parts, ", "))
end
