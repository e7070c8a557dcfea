-- Concurrency: at most limit permits held per key at once. Twin of
-- algorithm/concurrency.go.
--
-- KEYS[1]  a sorted set: member a permit's identity, score the instant it
--          expires (integer microseconds since the Unix epoch); absent
--          means no permit is held.
-- ARGV[1]  now (integer microseconds since the Unix epoch) or "" for TIME
-- ARGV[2]  n, the cost of a plain decision (the slots asked for)
-- ARGV[3]  limit, the most permits held at once
-- ARGV[4]  ttl, in microseconds: a permit expires ttl after it was taken
--          or last renewed
-- ARGV[#ARGV]  "acquire", "release" or "renew", after ARGV[#ARGV-1] = the
--              permit's identity: a permit mode (algorithm.Holder); "peek"
--              or nothing: a plain decision, which writes nothing either way
-- Returns {allowed, remaining, retry_after_us, reset_after_us}.
--
-- Expiry is by the decision's clock (TIME unless the caller passed now),
-- never by the holder's: every permit mode first drops the permits whose
-- expiry is <= now. The key's own TTL is its last permit's expiry, so a
-- key whose holders all crashed leaves nothing behind.
--
-- Scores and times are formatted with %d before they are passed to Redis:
-- a Lua number passed as it is would be written with 14 significant
-- digits, and times in microseconds have 16.
-- (key, n and now: see preamble.lua)
local limit = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local op = ARGV[#ARGV]
local t = string.format('%d', now)

-- score returns the score of the member at rank i, as a number.
local function score(i)
  local r = redis.call('ZRANGE', key, i, i, 'WITHSCORES')
  return tonumber(r[2])
end

if op == 'acquire' or op == 'release' or op == 'renew' then
  local id = ARGV[#ARGV - 1]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', t)
  local held = redis.call('ZSCORE', key, id)
  local allowed, retry = 0, 0
  if op == 'acquire' then
    -- A permit already held is renewed: a retried acquire never takes
    -- two slots.
    if held or redis.call('ZCARD', key) < limit then
      redis.call('ZADD', key, string.format('%d', now + ttl), id)
      allowed = 1
    else
      -- An upper bound on the wait: a release may come sooner.
      retry = score(0) - now
    end
  elseif op == 'release' then
    redis.call('ZREM', key, id)
    allowed = 1
  elseif held then
    redis.call('ZADD', key, string.format('%d', now + ttl), id)
    allowed = 1
  else
    -- Not held (expired or released): never brought back.
    retry = ttl
  end
  local count = redis.call('ZCARD', key)
  local reset = 0
  if count > 0 then
    reset = score(-1) - now
    redis.call('PEXPIRE', key, string.format('%d', math.ceil(reset / 1000)))
  end
  return {allowed, math.max(0, limit - count), retry, reset}
end

-- A plain decision: are n slots free now? It holds nothing and drops
-- nothing.
local held = redis.call('ZCOUNT', key, '(' .. t, '+inf')
local remaining = math.max(0, limit - held)
local reset = 0
if held > 0 then reset = score(-1) - now end
if n > limit then
  -- Never passable: say when every permit has expired (or a whole ttl).
  local retry = reset
  if retry == 0 then retry = ttl end
  return {0, remaining, retry, reset}
end
if held + n > limit then
  -- Enough permits must expire: the (held+n-limit)-th earliest live one.
  local r = redis.call('ZRANGEBYSCORE', key, '(' .. t, '+inf', 'WITHSCORES', 'LIMIT', held + n - limit - 1, 1)
  return {0, remaining, tonumber(r[2]) - now, reset}
end
return {1, remaining, 0, reset}
