-- The preamble of every single strategy's script: scripts.go prepends it
-- to sliding_window_log.lua, token_bucket.lua, fixed_window.lua,
-- sliding_window_counter.lua and concurrency.lua, so the calling convention (see scripts.go)
-- is read in one place. It reads the key, the mode (the last argument),
-- the cost n, and now: the caller's time, or else the Redis server's TIME,
-- in integer microseconds since the Unix epoch.
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
