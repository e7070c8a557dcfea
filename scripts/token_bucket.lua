-- Token bucket in exact integer arithmetic. Twin of algorithm/token_bucket.go.
--
-- KEYS[1]  a string "<tat>" or "<tat>:<e>:<R>" (see below); absent means full.
-- ARGV[1]  now (integer microseconds since the Unix epoch) or "" for TIME
-- ARGV[2]  n, the cost of this request
-- ARGV[3]  burst, the bucket's capacity in tokens
-- ARGV[4]  R, units refilled per microsecond
-- ARGV[5]  P, units per token
-- ARGV[#ARGV]  "peek" on a peek: decide, and write nothing; "refund" on a
--              refund: put n tokens back (below); "lease" on a lease, after
--              ARGV[#ARGV-3..#ARGV-1] = back_at, back, want: put back
--              tokens back as a refund does, then take a lease (below and
--              algorithm.Leaser); "atmost" on a partial grant: take the
--              most of n that the bucket holds (below)
--              "charge" after ARGV[#ARGV-1] = the debt cap: record n past
--              the limit, up to the cap (below and algorithm.Charger)
-- Returns {allowed, remaining, retry_after_us, reset_after_us}; a lease
-- or a partial grant returns {granted, remaining, retry_after_us,
-- reset_after_us, now}.
--
-- Units: one token is P units and the bucket refills R units per microsecond,
-- where R/P = rate/per reduced by their greatest common divisor, so that
-- every quantity is an integer and the capacity C = burst*P stays below 2^53.
-- The state is the bucket's debt, C minus its level, written as the instant it
-- will be full again: tat (theoretical arrival time, a whole microsecond,
-- rounded up) less e/R, 0 <= e < R. When e is 0, as it always is when rate
-- divides per in microseconds, the value is a plain integer, which Redis
-- stores in the fewest bytes. Otherwise the value names the R that e is
-- counted in: a bucket of another rate sharing the key (a per-key tier,
-- fleetlimit.WithStrategyFor) leaves e out, so that it counts the debt up
-- to a microsecond's refill high, never low. "<tat>:<e>" without R is read
-- as e in this bucket's units.
--
-- Out of memory: the only write is the admission's SET, which a Redis over
-- maxmemory (noeviction) refuses with OOM, as a script's first write, before
-- anything is written. A denial writes nothing and is still answered. Keep
-- any new write after a command Redis refuses when full (see
-- sliding_window_log.lua).
-- (key, peek, refund, lease, atmost, n and now: see preamble.lua)
local burst = ARGV[3] + 0
local R = ARGV[4] + 0
local P = ARGV[5] + 0
local C = burst * P
local fill = math.ceil(C / R) -- microseconds to fill an empty bucket

local debt = 0
local vtat, ve = 0, 0 -- the stored instant, for a charge
local v = redis.call('GET', key)
if v then
  -- Parse strictly: tonumber alone would take "inf", "0x1A" or " 12 "
  -- written by something else, and deny for ever. The forms are tried in
  -- turn, the plain integer first: it is every value of a bucket whose
  -- rate divides its period in microseconds, and takes one match; the
  -- form this script writes otherwise takes two, the older "<tat>:<e>"
  -- three (a plain search for ':' to choose the form first cost one call
  -- more on a plain integer, and saved none on the others).
  local tat, e, r = string.match(v, '^%d+$'), '0', nil
  if not tat then
    tat, e, r = string.match(v, '^(%d+):(%d+):(%d+)$')
    if not tat then
      tat, e = string.match(v, '^(%d+):(%d+)$')
    end
  end
  -- Each number below 2^53 has at most 16 digits.
  if not tat or #tat > 16 or #e > 16 or (r and #r > 16) then
    return redis.error_reply('WRONGTYPE ' .. key .. ' does not hold a token bucket')
  end
  tat, e = tat + 0, e + 0
  if r and r + 0 ~= R then e = 0 end
  local back = 0
  if refund then back = n elseif lease then back = ARGV[#ARGV - 2] + 0 end
  if back > 0 and tat > now then
    -- Refund: the bucket is full at tat - e/R; n tokens earlier is
    -- tat - (e + n*P)/R, moved on the stored instant (not on the debt seen
    -- at now) so that a clock behind gets back exactly n tokens. More than
    -- burst tokens fill any bucket, and keep u below 2^53. Once full, the
    -- key goes, as it would expire.
    local u = e + math.min(back, burst) * P
    local rem = math.fmod(u, R)
    tat, e = tat - (u - rem) / R, rem
    if tat > now then
      local value = string.format('%d', tat)
      if e > 0 then value = value .. string.format(':%d:%d', e, R) end
      redis.call('SET', key, value, 'PX', string.format('%d', math.ceil((tat - now) / 1000)))
    else
      redis.call('DEL', key)
      tat, e = 0, 0
    end
  end
  vtat, ve = tat, e
  if tat > now then
    -- A clock behind the last writer sees at most an empty bucket (elapsed
    -- time is clamped at zero), never a debt beyond the capacity.
    if tat - now > fill then
      debt = C
    else
      debt = (tat - now) * R - e
      if debt > C then debt = C end
    end
  end
end

-- The time until full again, read off the stored instant (e/R is less
-- than a microsecond), unclamped: a debt past the capacity (a charge) or a
-- clock behind the last writer's counts whole.
local full_in = 0
if vtat > now then full_in = vtat - now end

if refund then
  return {1, math.floor((C - debt) / P), 0, full_in}
end

if charge then
  -- Charge (algorithm.Charger): n tokens more are owed, past the capacity
  -- too, down to a level of -max_debt tokens: the units owed are capped at
  -- C + max_debt*P, below 2^53 - R so that every debt below is an exact
  -- integer, and in time (below). The debt is read off the stored
  -- instant, unclamped (a clock behind sees its lag as debt, and records
  -- less). The reply's third integer is the tokens the caps cut off.
  local max_debt = ARGV[#ARGV - 1] + 0
  if max_debt < 0 then max_debt = burst end
  local ceiling = 9007199254740992 - R
  if max_debt <= math.floor((ceiling - C) / P) then ceiling = C + max_debt * P end
  -- And in time: the instant full again stays at most 2^53 µs, which this
  -- script writes and reads back exactly (a slow bucket, a large cap).
  local room = 9007199254740992 - now
  local rest = math.fmod(ceiling, R)
  local full_at = (ceiling - rest) / R
  if rest > 0 then full_at = full_at + 1 end
  if full_at > room then ceiling = room * R end
  local owed, over = 0, false
  if vtat > now then
    if vtat - now > math.ceil(ceiling / R) then
      over = true
    else
      owed = (vtat - now) * R - ve
    end
  end
  local k = 0
  if not over and owed < ceiling then k = math.min(n, math.floor((ceiling - owed) / P)) end
  if k > 0 then
    owed = owed + k * P
    local d = math.ceil(owed / R)
    local e = d * R - owed
    vtat = now + d
    local value = string.format('%d', vtat)
    if e > 0 then value = value .. string.format(':%d:%d', e, R) end
    redis.call('SET', key, value, 'PX', string.format('%d', math.ceil(d / 1000)))
  end
  if over then return {1, 0, n - k, vtat - now} end
  return {1, math.floor(math.max(0, C - owed) / P), n - k, math.ceil(owed / R)}
end

local granted = n
if lease then
  -- The fair share: at most half of what the bucket holds, unless n alone
  -- needs more; never more than want (see algorithm.Leaser).
  local want = ARGV[#ARGV - 1] + 0
  local available = math.floor((C - debt) / P)
  if want == 0 then return {0, available, 0, 0, now} end
  granted = lease_units(n, burst, available, want)
  n = granted
end

if atmost then
  -- A partial grant (algorithm.Granter): the most of n the bucket holds,
  -- decided as a request of that cost; none, as a request of 1, whose
  -- denial says when one token is back.
  granted = math.min(n, math.floor((C - debt) / P))
  n = math.max(granted, 1)
end

if n <= burst and debt + n * P <= C then
  debt = debt + n * P
  local d = math.ceil(debt / R) -- microseconds until full again
  if not peek then
    local e = d * R - debt
    local value
    if e == 0 then
      value = string.format('%d', now + d)
    else
      value = string.format('%d:%d:%d', now + d, e, R)
    end
    redis.call('SET', key, value, 'PX', string.format('%d', math.ceil(d / 1000)))
  end
  if lease or atmost then return {granted, math.floor((C - debt) / P), 0, d, now} end
  return {1, math.floor((C - debt) / P), 0, d}
end

local reset = full_in
local retry
if n > burst then
  -- Never passable: say when the bucket is full again (or a whole fill).
  retry = reset
  if retry == 0 then retry = fill end
else
  -- ceil((owed + n*P - C)/R) for the units owed unclamped, (vtat-now)*R
  -- - ve, computed without the product: vtat-now less floor((ve + C -
  -- n*P)/R), an exact integer division (fmod is exact).
  local q = ve + C - n * P
  retry = reset - (q - math.fmod(q, R)) / R
end
if lease or atmost then return {0, math.floor((C - debt) / P), retry, reset, now} end
return {0, math.floor((C - debt) / P), retry, reset}
