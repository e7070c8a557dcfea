-- The preamble of every script here: scripts.go prepends it to
-- sliding_window_log.lua, token_bucket.lua, fixed_window.lua,
-- sliding_window_counter.lua, concurrency.lua and the drivers all.lua and
-- penalty.lua, so the calling convention (see scripts.go) is read in one
-- place. It reads the key, the mode (the last argument), the cost n, and
-- now: the caller's time, or else the Redis server's TIME, in integer
-- microseconds since the Unix epoch. A driver reads its keys itself (key
-- is its first) and hands now, read once, to every script it runs, so
-- that they all judge at the same instant.
local key = KEYS[1]
local peek = ARGV[#ARGV] == 'peek'
local refund = ARGV[#ARGV] == 'refund'
local lease = ARGV[#ARGV] == 'lease'
-- "charge" (fleetlimit.Reservation.Settle): charge n past the limit, up to
-- the debt cap ARGV[#ARGV-1] (units past the limit; negative: the limit).
local charge = ARGV[#ARGV] == 'charge'
local atmost = ARGV[#ARGV] == 'atmost'
local n = tonumber(ARGV[2])
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- lease_units is the units a lease takes (algorithm.Leaser; grant in
-- algorithm/lease.go): for a request of cost n that passes (n <= cap, the
-- most one request may cost, and n <= available), the fair share: at most
-- half of the available units, unless n alone needs more, and never more
-- than want; else n, decided (and denied) as it is.
local function lease_units(n, cap, available, want)
  if n <= cap and n <= available then
    return math.min(want, math.max(n, math.floor(available / 2)))
  end
  return n
end
