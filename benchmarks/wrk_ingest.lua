-- wrk script: POST pre-signed, unique Stripe events (one file per wrk thread, written by
-- benchmarks/load.py) and print the result as one JSON line. Usage:
--   wrk -t T -c C -d 10s -s wrk_ingest.lua URL -- /path/prefix_
local counter = 0

function setup(thread)
   thread:set("thread_index", counter)
   counter = counter + 1
end

function init(args)
   requests = {}
   total = 0
   for line in io.lines(args[1] .. thread_index .. ".txt") do
      local signature, body = line:match("^([^\t]*)\t(.*)$")
      total = total + 1
      requests[total] = wrk.format("POST", "/webhooks/stripe",
         {["Content-Type"] = "application/json", ["Stripe-Signature"] = signature}, body)
   end
   position = 0
end

function request()
   -- Wrapping around would send duplicates; load.py writes more than a run can send.
   position = position % total + 1
   return requests[position]
end

function done(summary, latency, requests)
   local errors = summary.errors
   io.write(string.format(
      '{"requests": %d, "duration_us": %d, "status_errors": %d, "socket_errors": %d, '
      .. '"p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, "mean_us": %.1f}\n',
      summary.requests, summary.duration, errors.status,
      errors.connect + errors.read + errors.write + errors.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency.max, latency.mean))
end
