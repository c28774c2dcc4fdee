-- One profile of the per-account quota experiment: `wrk ... -s profile.lua URL -- <account>`.
--   <account>  an X-Account-ID value, sent on every request
--   @none      no X-Account-ID header (the server decides it as ANONYMOUS)
--   @new:TAG   a new account id on every request: invalid<TAG>-<thread>-<n>@example.com
-- When the run ends, one line "RESULT <json>" gives the counts and latency percentiles (microseconds).

local threads = {}
local counter = 0
local tag = ""
-- thread_index is set per thread by setup() (thread:set makes it a global of the thread).

function setup(thread)
  thread:set("thread_index", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  local account = args[1] or "@none"
  if account:sub(1, 5) == "@new:" then
    tag = account:sub(6)
    request = function()
      counter = counter + 1
      local id = string.format("invalid%s-%d-%d@example.com", tag, thread_index, counter)
      return wrk.format(nil, nil, { ["X-Account-ID"] = id })
    end
  elseif account ~= "@none" then
    wrk.headers["X-Account-ID"] = account
  end
end

local percentiles = { 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9 }

function done(summary, latency, requests)
  local parts = {}
  for _, p in ipairs(percentiles) do
    table.insert(parts, string.format('"%s": %d', tostring(p), latency:percentile(p)))
  end
  local errors = summary.errors
  io.write(string.format(
    'RESULT {"requests": %d, "refused": %d, "duration_us": %d, "socket_errors": %d, '
      .. '"max_us": %d, "mean_us": %.1f, "percentiles_us": {%s}}\n',
    summary.requests, errors.status, summary.duration,
    errors.connect + errors.read + errors.write + errors.timeout,
    latency.max, latency.mean, table.concat(parts, ", ")))
end
