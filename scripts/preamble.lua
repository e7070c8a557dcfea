-- The preamble of every script here: scripts.go prepends it to
-- sliding_window_log.lua, token_bucket.lua, fixed_window.lua,
-- sliding_window_counter.lua, concurrency.lua and the drivers all.lua and
-- penalty.lua, so the calling convention (see scripts.go) is read in one
-- place. It reads the key, the mode (the last argument), the cost n, and
-- now: the caller's time, or else the Redis server's TIME, in integer
-- microseconds since the Unix epoch. A driver reads its keys itself (key
-- is its first) and hands now, read once, to every script it runs, so
-- that they all judge at the same instant.
--
-- A script runs on every decision, and one Redis serves a whole fleet:
-- the Redis CPU a decision costs bounds the decisions per second of all
-- of it. So the decision scripts (token_bucket.lua, fixed_window.lua,
-- sliding_window_counter.lua and sliding_window_log.lua) and this
-- preamble spend as little as they can:
-- a decimal string that holds a number (by the calling convention, or by
-- a pattern it has just matched) is converted by arithmetic, x + 0, which
-- reads it once where tonumber reads it twice (lua_isnumber, then
-- lua_tonumber); tonumber is kept where a string may hold something else
-- (now, "" for TIME). A number they pass to redis.call is formatted with
-- %d first, a string Redis takes as it is: %d is exact for every integer
-- they pass (string.format casts it to a long; all are below 2^53), and
-- Redis 7.0 would print a Lua number with %.17g, which costs more.
local key = KEYS[1]
local mode = ARGV[#ARGV]
local peek = mode == 'peek'
local refund = mode == 'refund'
local lease = mode == 'lease'
-- "charge" (fleetlimit.Reservation.Settle): charge n past the limit, up to
-- the debt cap ARGV[#ARGV-1] (units past the limit; negative: the limit).
local charge = mode == 'charge'
local atmost = mode == 'atmost'
local n = ARGV[2] + 0
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- lease_units is the units a lease takes (algorithm.Leaser; grant in
-- algorithm/lease.go): for a request of cost n that passes (n <= cap, the
-- most one request may cost, and n <= available), the fair share: at most
-- half of the available units, unless n alone needs more, and never more
-- than want; else n, decided (and denied) as it is. It is made only for a
-- lease, the one mode that calls it, rather than on every decision.
local lease_units
if lease then
  lease_units = function(n, cap, available, want)
    if n <= cap and n <= available then
      return math.min(want, math.max(n, math.floor(available / 2)))
    end
    return n
  end
end
