-- ratekeeper: one decision, atomically. The algorithms of src/algorithm/ (see each file there), with
-- the same integer arithmetic, in time relative to `now` so that every number stays below 2^53.
--
-- KEYS[i]  the state of limit i of one (peer, group); all share one hash tag (one Cluster slot).
-- ARGV     now_s now_ns (empty: Redis TIME), cost, max_wait_ns, policy ("all" | "fallback"), operation
--          ("0": decide, "1": decide and report, "peek": report what a decision would be, writing none of
--          it, "reduce": give `cost` back, "refund:<written>:<s>:<ns>": give
--          back a cancelled wait's slot (its limits, and its instant as a decision replied it), "release": release concurrency permits, "move": only replay the
--          moves, "cap:<limits>:<reset_ns>:<age_ns>": a server's word, `cost` the remaining), take ("rates" | "both" | "permits": which limits a decision takes), lease (concurrency
--          leases' member prefix: "<node>:<n>", or "<node>:" to release), lease ttl ms, node (the
--          limiter's name), head (the order of the newest move it made), limits (count), then 7 fields
--          per limit: kind, burst, p1 .. p5; then moves (count), 17 fields each: limit index, order,
--          instant (ns relative to now, <= 0), the limit moved from (7 fields) and to (7; kind "": gone)
--          (src/backend/script.rs).
-- State    "s ns a b sig seen": the absolute instant t as seconds and nanoseconds, the fields a and b of
--          src/algorithm/mod.rs's State, the limit it was written under, and "<node>/<head>" of the
--          limiter that wrote it. A key expires when its state stops constraining (now >= t), on Redis's
--          clock; a limiter on a ManualClock writes keys that do not expire (Redis's clock is not its).
-- Moves    In memory a change of limits (a reconfiguration, a key's quota) moves every state at that
--          instant, keeping what it used. Here each state is moved at its key's next call instead,
--          through the moves the limiter sends that the state has not seen, each at its own instant:
--          the same arithmetic at the same instants, so the same decisions.
-- Reply    { allowed (1 | 0), wait_ns, retry_ns (-1: never), now_s, now_ns, written (bit i: limit i took
--            the request), refused_by ("" | "rate" | "concurrency"), then per limit when asked to report:
--            remaining, reset_after_ns, next_ns }: whole numbers below 2^53 as integer replies. A
--            reduction, refund or release replies { "1" }; a word { "1" } when a limit took it, else { "0" }.
-- Called    this file defines `decide`; src/backend/script.rs makes of it a Redis Function library that
--           registers it (FCALL, Redis 7+: the definitions below run once, at load) and, for servers
--           without functions, a script that calls it (EVALSHA: they run on every call).

local E9 = 1000000000

-- One decision's arguments, set by `decide` on each call: upvalues of the algorithms below, which are
-- made once when the library loads (a Redis Function) rather than on every call. `floor` too: a
-- library's top level cannot see the standard library (Redis runs it with `redis` alone).
local floor, now_s, now_ns, now_ms, cost, max_wait, policy, operation, want_report, take, lease, lease_ttl, n
local node, head, manual, manual_pool

-- '%d', not '%.0f': every number written is a whole number below 2^53, which Lua's '%d' (a C long)
-- holds exactly, and C's printf takes a few times longer to write a double with '%.0f'.
local function str(x)
  return string.format('%d', x)
end

-- a × b mod m without overflow (a, b, m < 2^52): the phase of `now` in a window aligned to zero.
local function mulmod(a, b, m)
  local r = 0
  a, b = a % m, b % m
  while b > 0 do
    if b % 2 == 1 then r = (r + a) % m end
    a = (a * 2) % m
    b = floor(b / 2)
  end
  return r
end

local function ceil_div(a, b)
  return floor((a + b - 1) / b)
end

-- States: nil (no key) or { t = ns relative to now, a, b, sig, seen, ledger }: `ledger`, when the key
-- has waits ahead, is its ledger as written (see "Waits" below).
local function parse_state(raw)
  local s, ns, a, b, sig, seen, ledger = string.match(raw, '^(%-?%d+) (%d+) (%d+) (%d+) ?(%S*) ?(%S*) ?(%S*)$')
  if not s then return nil end
  local t = (tonumber(s) - now_s) * E9 + (tonumber(ns) - now_ns)
  if ledger == '' then ledger = nil end
  return { t = t, a = tonumber(a), b = tonumber(b), sig = sig, seen = seen, ledger = ledger }
end

-- Expires `key` in `ms` milliseconds (at least 1) of Redis's clock; not when the limiter decides on its
-- own clock (a ManualClock's time, in tests), which Redis's does not follow: the state's end is then
-- checked on that clock when the key is read.
local function expire(key, ms)
  if manual then return end
  redis.call('PEXPIRE', key, math.max(1, ms))
end

-- What a state written now has seen: every move up to `head`.
-- (Made once per call, in `decide`.)
local seen_text
local function seen_now()
  return seen_text
end

-- The state, the limit it was written under and the moves it has seen; and `ledger`, the key's waits
-- (a write without one forgets them: the ledger describes the state it was written with, no other).
-- `before`: the key's state as read, when this write replaces it; a state that ends no later than it
-- keeps the key's time to live, which every writer set to end no earlier than the state it wrote (one
-- command's work less: a window's count rising within its window).
local function store(l, key, state, ledger, before)
  local abs_ns = now_ns + state.t
  local s = now_s + floor(abs_ns / E9)
  local ttl_ms = ceil_div(state.t, 1000000)
  if ttl_ms <= 0 then
    redis.call('DEL', key)
    return
  end
  local value = string.format('%d %d %d %d %s %s', s, abs_ns % E9, state.a, state.b, l.sig, seen_now())
  if ledger then value = value .. ' ' .. ledger end
  if manual then
    redis.call('SET', key, value)
  elseif before ~= nil and state.t <= before.t then
    redis.call('SET', key, value, 'KEEPTTL')
  else
    redis.call('SET', key, value, 'PX', ttl_ms)
  end
end

-- Each algorithm: evaluate(limit, state, at) -> new_state | nil, retry (nil: never);
-- report(limit, state) -> remaining, reset_after, next.
local algorithms = {}

-- GCRA (src/algorithm/gcra.rs). p: count, interval_ns, interval_rem, tau_ns, tau_rem.
local function gcra_tat(l, state, at)
  if state == nil or state.t < at then return at, 0 end
  if state.a < l.p1 then return state.t, state.a end
  return state.t + 1, 0
end
-- The arrival time `ns` (and remainder `rem`) moved back by `cost` intervals, never before now.
local function gcra_back(l, ns, rem)
  local step_rem = cost * l.p3
  local step_ns = cost * l.p2 + floor(step_rem / l.p1)
  step_rem = step_rem % l.p1
  if rem >= step_rem then
    ns, rem = ns - step_ns, rem - step_rem
  else
    ns, rem = ns - step_ns - 1, rem + l.p1 - step_rem
  end
  if ns >= 0 then return { t = ns, a = rem, b = 0 } end
  return { t = 0, a = 0, b = 0 }
end
algorithms.gcra = {
  evaluate = function(l, state, at)
    local ns, rem = gcra_tat(l, state, at)
    rem = rem + cost * l.p3
    ns = ns + cost * l.p2 + floor(rem / l.p1)
    rem = rem % l.p1
    local allowed_at = ns - l.p4
    if rem > l.p5 then allowed_at = allowed_at + 1 end
    if allowed_at > at then return nil, allowed_at - at end
    return { t = ns, a = rem, b = 0 }
  end,
  report = function(l, state)
    local ns, rem = gcra_tat(l, state, 0)
    local period = l.p1 * l.p2 + l.p3
    local slack = math.max(0, (l.p4 - ns) * l.p1 + (l.p5 - rem))
    local remaining = floor(slack / period)
    local reset = ns
    if rem > 0 then reset = reset + 1 end
    local next_ns = 0
    if ns > 0 then
      local short = (remaining + 1) * period - slack
      next_ns = math.min(ceil_div(short, l.p1), reset)
    end
    return remaining, reset, next_ns
  end,
  -- A lease's unused units, the newest `cost` slots.
  give_back = function(l, state)
    return gcra_back(l, state.t, state.a)
  end,
  -- Moves the arrival time back by `cost` intervals, never before now; while the newest slot is now or
  -- later, only the newest (at `at`) can be given back, or a new arrival would get a promised slot.
  refund = function(l, state, at)
    local ns, rem = gcra_tat(l, state, 0)
    local newest = ns - l.p4
    if rem > l.p5 then newest = newest + 1 end
    if newest >= 0 and newest ~= at then return state end
    return gcra_back(l, ns, rem)
  end,
}

-- Windows aligned to the key's first request since it was last idle (src/algorithm/windows.rs). p: capacity, window_ns.
-- b odd: a server said where the window ends (a fixed window capped by a word, `windows_cap`): it has
-- started, however far its end; b's other bits stamp where the server's window began (`origin_stamp`).
local ANNOUNCED = 1
local function windows_current(l, state, at)
  if state == nil or at >= state.t then return at + l.p2, l.p1 end
  return state.t, math.min(state.a, l.p1)
end
local function announced(state)
  return state ~= nil and state.b % 2 == ANNOUNCED
end
algorithms.windows = {
  evaluate = function(l, state, at)
    local finish, permits = windows_current(l, state, at)
    if permits < cost then return nil, finish - at end
    local start = finish - l.p2
    if at < start and not announced(state) then return nil, start - at end
    -- A window that ended is followed by one of the limit's own.
    local b = 0
    if state ~= nil and at < state.t then b = state.b end
    return { t = finish, a = permits - cost, b = b }
  end,
  report = function(l, state)
    local finish, permits = windows_current(l, state, 0)
    if permits >= l.p1 then return permits, 0, 0 end
    -- A reserved later window's permits are not there yet.
    if finish - l.p2 > 0 and not announced(state) then permits = 0 end
    return permits, finish, finish
  end,
  -- Gives `cost` back to the window `at` fell in, if it is the key's newest.
  refund = function(l, state, at)
    if at >= state.t or (at < state.t - l.p2 and not announced(state)) then return state end
    return { t = state.t, a = math.min(state.a + cost, l.p1), b = state.b }
  end,
}

-- A server's word (src/algorithm/windows.rs `cap`): the window ends at `reset_at` with at most `remaining`
-- permits, heard in reply to a request admitted at `sent_at` (instants relative to now); nil leaves the
-- state as it is (a stale word, a reset already past, waiters' reserved windows ahead).
local WORD_SLACK_NS = 1000000
-- The coarsest rounding of a reset that servers send (whole seconds, up or down).
local RESET_GRAIN_NS = 1000000000
local STAMP_MODULUS = 2147483648
-- The milliseconds of instant `x` (relative to now) on the script's clock, modulo 2^31.
local function stamp_ms(x)
  return (now_s * 1000 + floor((now_ns + x) / 1000000)) % STAMP_MODULUS
end
local function origin_stamp(x)
  return stamp_ms(x) * 2 + ANNOUNCED
end
local function sent_before_origin(b, x)
  local ahead = (floor(b / 2) - stamp_ms(x)) % STAMP_MODULUS
  return ahead ~= 0 and ahead < 536870912
end
local function windows_cap(l, state, remaining, reset_at, sent_at)
  if reset_at <= 0 then return nil end
  local admitted = sent_at
  sent_at = sent_at + WORD_SLACK_NS
  local b
  if state ~= nil and state.t > 0 then
    if announced(state) then
      if sent_before_origin(state.b, sent_at) then return nil end
      -- A word from the server's next window (its window ends more than a grain after this one's).
      if admitted + reset_at > state.t + RESET_GRAIN_NS then
        return { t = reset_at, a = math.min(remaining, l.p1), b = state.b }, l.p1
      end
      -- A late word about an earlier window.
      if reset_at + 2 * RESET_GRAIN_NS < state.t then return nil end
      b = state.b
    else
      local start = state.t - l.p2
      if start > 0 or start > sent_at then return nil end
      b = origin_stamp(start)
    end
  elseif announced(state) then
    if sent_at < state.t then return nil end
    b = origin_stamp(state.t)
  else
    b = origin_stamp(admitted)
  end
  local _, permits = windows_current(l, state, 0)
  -- After every request admitted by now.
  if remaining == 0 then b = origin_stamp(2 * WORD_SLACK_NS) end
  return { t = reset_at, a = math.min(permits, remaining), b = b }, permits
end

-- A server's word for a GCRA (src/algorithm/gcra.rs `cap`): `remaining` left, and full again at `reset_at`
-- (relative to now); the arrival time moves to the later of the two, never earlier. nil when it changes
-- nothing. Also what the key had left before it.
local function gcra_cap(l, state, remaining, reset_at)
  local ns, rem = gcra_tat(l, state, 0)
  local had = algorithms.gcra.report(l, state)
  local lead = math.max(0, l.p4 * l.p1 + l.p5 - remaining * (l.p1 * l.p2 + l.p3))
  local tns, trem = ns, rem
  local rns, rrem = floor(lead / l.p1), lead % l.p1
  if rns > tns or (rns == tns and rrem > trem) then tns, trem = rns, rrem end
  if reset_at > tns then tns, trem = reset_at, 0 end
  if tns == ns and trem == rem then return nil end
  return { t = tns, a = trem, b = 0 }, had
end

-- Sliding window counter aligned to the clock's zero (src/algorithm/sliding_window.rs). p: limit,
-- window_ns. `phase`: where `now` falls in its window.
local function sliding_view(l, state, at, phase)
  local w = l.p2
  local start = at - (phase + at) % w
  if state == nil then return start, 0, 0 end
  local stored = state.t - 2 * w
  if stored >= start then return stored, state.a, state.b end
  if stored + w == start then return start, 0, state.a end
  return start, 0, 0
end
local function sliding_earliest(l, current, previous)
  local room = l.p1 - (current + cost)
  if room < 0 then return nil end
  if previous == 0 then return 0 end
  local offset = math.max(0, l.p2 - floor(room * l.p2 / previous))
  if offset < l.p2 then return offset end
  return nil
end
algorithms.sliding_window = {
  evaluate = function(l, state, at)
    local start, current, previous = sliding_view(l, state, at, l.phase)
    local elapsed = math.max(0, at - start)
    local offset = sliding_earliest(l, current, previous)
    if offset ~= nil and offset <= elapsed and at >= start then
      return { t = start + 2 * l.p2, a = current + cost, b = previous }
    end
    if offset ~= nil then return nil, start + offset - at end
    local next_offset = sliding_earliest(l, 0, current) or l.p2
    return nil, start + l.p2 + next_offset - at
  end,
  report = function(l, state)
    local start, current, previous = sliding_view(l, state, 0, l.phase)
    local w = l.p2
    local elapsed = math.min(math.max(0, -start), w)
    local used = current * w + previous * (w - elapsed)
    local remaining = floor(math.max(0, l.p1 * w - used) / w)
    local reset = 0
    if current > 0 then reset = start + 2 * w elseif previous > 0 then reset = start + w end
    reset = math.max(0, reset)
    return remaining, reset, reset
  end,
  -- Takes `cost` off the window that `at` (the admission's instant) fell in, if still current or previous.
  refund = function(l, state, at)
    local stored = state.t - 2 * l.p2
    if at >= stored then
      return { t = state.t, a = math.max(0, state.a - cost), b = state.b }
    elseif at + l.p2 >= stored then
      return { t = state.t, a = state.a, b = math.max(0, state.b - cost) }
    end
    return state
  end,
}

-- Leaky bucket (src/algorithm/leaky_bucket.rs). p: capacity, reduction, interval_ns.
local function leaky_level(l, state, at)
  if state == nil or state.a == 0 or at >= state.t then return at, 0 end
  local base = state.t - ceil_div(state.a, l.p2) * l.p3
  if at < base then return base, state.a end
  local ticks = floor((at - base) / l.p3)
  return base + ticks * l.p3, state.a - ticks * l.p2
end
local function leaky_evaluate(l, state, at)
  local base, level = leaky_level(l, state, at)
  if at < base then
    local _, retry = leaky_evaluate(l, state, base)
    return nil, base - at + (retry or 0)
  end
  if level + cost <= l.p1 then
    local filled = level + cost
    return { t = base + ceil_div(filled, l.p2) * l.p3, a = filled, b = 0 }
  end
  local ticks = ceil_div(level + cost - l.p1, l.p2)
  return nil, base + ticks * l.p3 - at
end
algorithms.leaky_bucket = {
  evaluate = leaky_evaluate,
  report = function(l, state)
    local _, level = leaky_level(l, state, 0)
    local reset = 0
    if level > 0 then reset = math.max(0, state.t) end
    return math.max(0, l.p1 - level), reset, reset
  end,
  refund = function(l, state)
    local base, level = leaky_level(l, state, 0)
    local left = math.max(0, level - cost)
    -- Reserved tokens all given back: what the bucket held before them leaks until `base` (as in Rust).
    if left == 0 and base > 0 then return { t = base, a = math.min(l.p2, l.p1), b = 0 } end
    return { t = base + ceil_div(left, l.p2) * l.p3, a = left, b = 0 }
  end,
}


-- Sliding log (src/algorithm/sliding_log.rs): a sorted set of the window's stamps. Scores are
-- nanoseconds after the log's epoch (kept exact below 2^53; the epoch moves to now whenever the log
-- empties), members "<score>#<n>"; one member scored -1 holds "~<epoch s> <epoch ns> <n>".
-- p: limit, window. A state: { key, off (epoch - now), n, meta }; an admission: { at, cost, idle_at }.
-- The exclusive lower bound of the stamps still live at `at` (t + W > at), never below the meta member.
local function log_after(l, st, at)
  return '(' .. str(math.max(at - l.p2 - st.off, -1))
end
local function log_live(l, st, at)
  return redis.call('ZCOUNT', st.key, log_after(l, st, at), '+inf')
end
local function log_last(st)
  local last = redis.call('ZREVRANGEBYSCORE', st.key, '+inf', '0', 'WITHSCORES', 'LIMIT', 0, 1)
  if last[2] then return tonumber(last[2]) + st.off end
  return nil
end
-- ZADD of `members` (score, member, score, member, ...), in commands of at most 500 pairs: Lua's stack
-- holds a few thousand arguments, and a log up to MAX_MEMBERS stamps.
local function zadd(key, members)
  for first = 1, #members, 1000 do
    redis.call('ZADD', key, unpack(members, first, math.min(first + 999, #members)))
  end
end
-- A sliding log's sorted set: { key, off, n, meta, sig, seen, log = true } (meta nil: empty).
-- `metas`: the reply to ZRANGEBYSCORE key -1 -1, when the caller read it already.
local function log_load(key, metas)
  local st = { key = key, off = 0, n = 0, meta = nil, sig = '', seen = '', log = true }
  local meta = (metas or redis.call('ZRANGEBYSCORE', key, -1, -1))[1]
  if meta then
    local s, ns, n, sig, seen = string.match(meta, '^~(%-?%d+) (%d+) (%d+) ?(%S*) ?(%S*)$')
    st.off = (tonumber(s) - now_s) * E9 + (tonumber(ns) - now_ns)
    st.n, st.meta, st.sig, st.seen = tonumber(n), meta, sig, seen
  end
  return st
end
algorithms.sliding_log = {
  load = function(_, key)
    return log_load(key)
  end,
  -- An admission carries what it read (the log, its live stamps at `at`, its newest stamp) for `store`.
  evaluate = function(l, st, at)
    local live = log_live(l, st, at)
    if live + cost <= l.p1 then
      return { at = at, cost = cost, st = st, live = live, last = log_last(st) or false }
    end
    -- The stamp whose leaving makes room for `cost`: the (live + cost - limit)-th live one.
    local index = live + cost - l.p1 - 1
    local stamp = redis.call('ZRANGEBYSCORE', st.key, log_after(l, st, at), '+inf', 'WITHSCORES', 'LIMIT', index, 1)
    return nil, tonumber(stamp[2]) + st.off + l.p2 - at
  end,
  -- Writes an admission (or a refund's `remove`, or a move's new meta: `moved`). An admission from
  -- `evaluate` brings the log as read (nothing wrote it since, in one call), so it is not read again;
  -- at now (`at` 0) the stamps left after those that left the window are its live ones, and its newest
  -- stamp is the later of the one it read and its own: 3 commands where there were 7.
  store = function(l, key, admit)
    local st = admit.st or algorithms.sliding_log.load(l, key)
    -- Stamps that left the window by now go (not at a move: a later move to a longer window would
    -- count them again, as memory's log, which a move leaves whole, does); an empty log takes now as
    -- its epoch. The meta member (scored -1) goes with them in one command when the range reaches it.
    local gone = -l.p2 - st.off
    if not admit.moved and gone >= 0 then
      redis.call('ZREMRANGEBYSCORE', key, st.meta and -1 or 0, str(gone))
    elseif st.meta then
      redis.call('ZREM', key, st.meta)
    end
    if admit.remove then
      -- Never more rounds than stamps (a reduction may ask for 2^63 - 1).
      for _ = 1, math.min(admit.remove, redis.call('ZCARD', key)) do
        local found = admit.at
          and redis.call('ZRANGEBYSCORE', key, str(admit.at - st.off), str(admit.at - st.off), 'LIMIT', 0, 1)[1]
          or redis.call('ZREVRANGEBYSCORE', key, '+inf', '0', 'LIMIT', 0, 1)[1]
        if found then redis.call('ZREM', key, found) end
      end
    end
    local now_read = admit.live ~= nil and admit.at == 0
    local stamps = now_read and admit.live or redis.call('ZCARD', key)
    if stamps == 0 then st.off = 0 end
    local epoch = now_ns + st.off
    local epoch_s = now_s + floor(epoch / E9)
    local members = {}
    for _ = 1, (admit.cost or 0) do
      st.n = st.n + 1
      local score = admit.at - st.off
      members[#members + 1] = str(score)
      members[#members + 1] = str(score) .. '#' .. str(st.n)
    end
    local last
    if not now_read then
      zadd(key, members)
      members = {}
      last = log_last(st)
    elseif #members > 0 then
      last = math.max(admit.last or admit.at, admit.at)
    elseif stamps > 0 then
      last = admit.last or nil
    end
    if last == nil then
      redis.call('DEL', key)
      return st
    end
    st.meta = '~' .. str(epoch_s) .. ' ' .. str(epoch % E9) .. ' ' .. str(st.n) .. ' ' .. l.sig .. ' ' .. seen_now()
    members[#members + 1] = -1
    members[#members + 1] = st.meta
    zadd(key, members)
    expire(key, ceil_div(last + l.p2, 1000000))
    return st
  end,
  report = function(l, st)
    local live = log_live(l, st, 0)
    if live == 0 then return l.p1, 0, 0 end
    local reset = math.max(0, log_last(st) + l.p2)
    return math.max(0, l.p1 - live), reset, reset
  end,
  -- Removes `cost` stamps made at `at` (the newest ones when none was).
  refund = function(_, _, at)
    return { at = at, cost = 0, remove = cost }
  end,
}

-- Concurrency permits as leases (src/algorithm/concurrency.rs): a sorted set of the permits in use,
-- each a member "<node>:<n>#<j>" scored by the millisecond it expires at, so that a crashed process's
-- permits come back. p: permits. A state: { key, used }.
algorithms.concurrency = {
  load = function(_, key)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', str(now_ms))
    return { key = key, used = redis.call('ZCARD', key) }
  end,
  evaluate = function(l, st)
    if st.used + cost <= l.p1 then return { take = cost } end
    return nil, 0
  end,
  store = function(_, key, change)
    if change.release then
      local removed = 0
      for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
        if removed >= change.release then break end
        if string.sub(member, 1, #lease) == lease then
          redis.call('ZREM', key, member)
          removed = removed + 1
        end
      end
    end
    for j = 1, (change.take or 0) do
      redis.call('ZADD', key, str(now_ms + lease_ttl), lease .. '#' .. j)
    end
    local used = redis.call('ZCARD', key)
    if used == 0 then
      redis.call('DEL', key)
    else
      local newest = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
      expire(key, tonumber(newest[2]) - now_ms)
    end
    return { key = key, used = used }
  end,
  report = function(l, st)
    return math.max(0, l.p1 - st.used), 0, 0
  end,
  refund = function()
    return nil
  end,
}

-- A limit from 7 fields of ARGV from `base`: kind, burst, p1 .. p5 (nil when the kind is empty: gone).
local function limit_at(ARGV, base)
  local kind = ARGV[base + 1]
  if kind == '' then return nil end
  local l = {
    kind = kind, burst = tonumber(ARGV[base + 2]),
    p1 = tonumber(ARGV[base + 3]), p2 = tonumber(ARGV[base + 4]), p3 = tonumber(ARGV[base + 5]),
    p4 = tonumber(ARGV[base + 6]), p5 = tonumber(ARGV[base + 7]),
    sig = table.concat({ kind, ARGV[base + 2], ARGV[base + 3], ARGV[base + 4], ARGV[base + 5], ARGV[base + 6],
      ARGV[base + 7] }, ','),
  }
  l.algorithm = algorithms[kind]
  if l.kind == 'sliding_window' then l.phase = (mulmod(now_s, E9, l.p2) + now_ns) % l.p2 end
  return l
end

-- The limit a state's signature names (nil: written by a version that did not name the algorithm).
local function limit_of_sig(sig)
  local fields = {}
  for field in string.gmatch(sig, '[^,]+') do fields[#fields + 1] = field end
  if #fields ~= 7 or algorithms[fields[1]] == nil then return nil end
  return limit_at(fields, 0)
end

-- A key's state whatever wrote it: a sorted set is a sliding log's (`log`), a string any other
-- algorithm's; nil when there is none.
-- One read in the usual case: the read the limit's own algorithm makes, and the other only when that
-- one finds a key of the other type (pcall: an error reply instead of an error).
local function load_any(l, key)
  if l.kind == 'concurrency' then return algorithms.concurrency.load(l, key) end
  local st
  if l.kind == 'sliding_log' then
    local metas = redis.pcall('ZRANGEBYSCORE', key, -1, -1)
    if metas.err then return parse_state(redis.call('GET', key)) end
    st = log_load(key, metas)
  else
    local raw = redis.pcall('GET', key)
    if type(raw) ~= 'table' then return raw and parse_state(raw) or nil end
    st = log_load(key)
  end
  if st.meta == nil then return nil end
  return st
end

-- What a state used under limit `l` at `at`, reservations included and never capped at a burst
-- (src/algorithm/mod.rs `used`).
local function used_at(l, state, at)
  if l.kind == 'gcra' then
    local ns, rem = gcra_tat(l, state, at)
    return ceil_div((ns - at) * l.p1 + rem, l.p1 * l.p2 + l.p3)
  elseif l.kind == 'windows' then
    if at >= state.t then return 0 end
    local finish, permits = windows_current(l, state, at)
    if announced(state) then return l.p1 - permits end
    return floor((finish - at - 1) / l.p2) * l.p1 + l.p1 - permits
  elseif l.kind == 'sliding_window' then
    local start, current, previous = sliding_view(l, state, at, l.phase)
    local w = l.p2
    local elapsed = math.min(math.max(0, at - start), w)
    return ceil_div(current * w + previous * (w - elapsed), w)
  elseif l.kind == 'sliding_log' then
    return redis.call('ZCOUNT', state.key, '(' .. str(math.max(at - l.p2 - state.off, -1)), '+inf')
  end
  local _, level = leaky_level(l, state, at)
  return level
end

-- The state of a key that used `used` at `at` under limit `l` (`with_used`); a sliding log gets one
-- run of `used` stamps at `at`, written at once (at most MAX_MEMBERS of them).
local function with_used(l, key, used, at, seen)
  if l.kind == 'sliding_log' then
    redis.call('DEL', key)
    if used <= 0 then return nil end
    local epoch = now_ns + at
    for j = 1, math.min(used, 100000) do
      redis.call('ZADD', key, 0, '0#' .. str(j))
    end
    local meta = '~' .. str(now_s + floor(epoch / E9)) .. ' ' .. str(epoch % E9) .. ' ' .. str(math.min(used, 100000))
      .. ' ' .. l.sig .. ' ' .. seen
    redis.call('ZADD', key, -1, meta)
    expire(key, ceil_div(at + l.p2, 1000000))
    return log_load(key)
  end
  if used <= 0 then return nil end
  local state
  if l.kind == 'gcra' then
    local lead = used * (l.p1 * l.p2 + l.p3)
    state = { t = at + floor(lead / l.p1), a = lead % l.p1, b = 0 }
  elseif l.kind == 'windows' then
    local windows = ceil_div(used, l.p1)
    state = { t = at + windows * l.p2, a = windows * l.p1 - used, b = 0 }
  elseif l.kind == 'sliding_window' then
    local start = at - (l.phase + at) % l.p2
    state = { t = start + 2 * l.p2, a = used, b = 0 }
  else
    state = { t = at + ceil_div(used, l.p2) * l.p3, a = used, b = 0 }
  end
  state.sig, state.seen = l.sig, seen
  return state
end

-- An announced window moved at `at` from limit `from` to `to`, having used `used`: it keeps the server's end,
-- with what `to` leaves of it, nothing carried past (src/algorithm/windows.rs `rescale_announced`); nil for
-- any other state.
local function rescale_announced(from, to, state, used, at)
  if from.kind ~= 'windows' or to.kind ~= 'windows' or not announced(state) or at >= state.t then return nil end
  return { t = state.t, a = math.max(to.p1 - used, 0), b = state.b }
end

-- A state moved at `at` from limit `from` to `to` (nil: gone), keeping what it used
-- (src/algorithm/mod.rs `rescale`): 2 used of 2/min leave 98 of 100/min. A sliding log keeps its stamps.
-- The moved state has seen the moves up to `seen` ("<node>/<order>").
local function move(from, to, state, at, key, seen)
  if to == nil then
    redis.call('DEL', key)
    return nil
  end
  -- The same constants (another rate that works out alike): the state means the same (as in Rust).
  if from.sig == to.sig or (from.kind == 'sliding_log' and to.kind == 'sliding_log') then
    state.sig, state.seen = to.sig, seen
    return state
  end
  local used = used_at(from, state, at)
  local kept = rescale_announced(from, to, state, used, at)
  if kept then
    kept.sig, kept.seen = to.sig, seen
    return kept
  end
  if state.log then redis.call('DEL', key) end
  local moved = with_used(to, key, used, at, seen)
  -- Nothing used: no state, and no key of another type left for a sliding log to read.
  if moved == nil then redis.call('DEL', key) end
  return moved
end

-- Whether a state has not seen the move of order `seq` (a state another limiter wrote has seen none of
-- this one's: it is moved when it was written under the move's old limit).
local function unseen(seq, state)
  local writer, seen = string.match(state.seen or '', '^(%x+)/(%d+)$')
  return writer ~= node or seq > tonumber(seen)
end

-- Waits (src/limiter/waits.rs): a key with waits ahead keeps, beside its state, a ledger: the state
-- before its oldest admission still ahead (and the limit it is under), then every admission since and
-- every change of its limit, in order. A wait given back is taken out and the rest replayed at their
-- instants: as if it had never asked, every promise kept. Written as parts joined by "/": the base
-- "<t>,<a>,<b>,<sig>" (t "-": no state), admissions "A<t>,<cost>", changes "M<t>,<sig>"; instants
-- "<s>.<ns>" (absolute: they outlive this call's `now`), a limit's signature with ":" for ",". The
-- sliding log keeps none (its stamps are its ledger), nor do permits.
local MAX_ENTRIES = 256

local function instant_of(text)
  local s, ns = string.match(text, '^(%-?%d+)%.(%d+)$')
  return (tonumber(s) - now_s) * E9 + (tonumber(ns) - now_ns)
end

local function instant_text(t)
  local abs_ns = now_ns + t
  return str(now_s + floor(abs_ns / E9)) .. '.' .. str(abs_ns % E9)
end

local function sig_of(text)
  return (string.gsub(text, ':', ','))
end

local function sig_text(sig)
  return (string.gsub(sig, ',', ':'))
end

-- { base = state | nil, limit, entries = { { at, cost } | { at, to } ... } } (nil: unreadable)
local function ledger_read(text)
  local ledger = { entries = {} }
  for part in string.gmatch(text, '[^/]+') do
    local tag = string.sub(part, 1, 1)
    if tag == 'A' then
      local at, c = string.match(part, '^A([^,]+),(%d+)$')
      ledger.entries[#ledger.entries + 1] = { at = instant_of(at), cost = tonumber(c) }
    elseif tag == 'M' then
      local at, sig = string.match(part, '^M([^,]+),(%S+)$')
      local to = limit_of_sig(sig_of(sig))
      if to == nil then return nil end
      ledger.entries[#ledger.entries + 1] = { at = instant_of(at), to = to }
    else
      local at, a, b, sig = string.match(part, '^([^,]+),(%d+),(%d+),(%S+)$')
      ledger.limit = limit_of_sig(sig_of(sig))
      if ledger.limit == nil then return nil end
      if at ~= '-' then ledger.base = { t = instant_of(at), a = tonumber(a), b = tonumber(b) } end
    end
  end
  return ledger
end

local function ledger_text(ledger)
  local base = ledger.base
  local parts = { '-,0,0,' .. sig_text(ledger.limit.sig) }
  if base then
    parts[1] = instant_text(base.t) .. ',' .. str(base.a) .. ',' .. str(base.b) .. ',' .. sig_text(ledger.limit.sig)
  end
  for _, e in ipairs(ledger.entries) do
    if e.to then
      parts[#parts + 1] = 'M' .. instant_text(e.at) .. ',' .. sig_text(e.to.sig)
    else
      parts[#parts + 1] = 'A' .. instant_text(e.at) .. ',' .. str(e.cost)
    end
  end
  return table.concat(parts, '/')
end

-- The state and limit after `entry` over `state` under `l` (nil state: none); false when an admission
-- no longer admits (it cannot: usage only ever makes an algorithm stricter).
local function ledger_apply(l, state, entry)
  if entry.to then
    if state == nil or entry.to.sig == l.sig then return state, entry.to end
    local used = used_at(l, state, entry.at)
    local kept = rescale_announced(l, entry.to, state, used, entry.at)
    if kept then
      kept.sig, kept.seen = entry.to.sig, ''
      return kept, entry.to
    end
    return with_used(entry.to, nil, used, entry.at, ''), entry.to
  end
  local saved = cost
  cost = entry.cost
  local after = l.algorithm.evaluate(l, state, entry.at)
  cost = saved
  if after == nil then return false end
  return after, l
end

local function ledger_ahead(ledger)
  for _, e in ipairs(ledger.entries) do
    if e.cost and e.at > 0 then return true end
  end
  return false
end

local function kept(l)
  return l.kind ~= 'concurrency' and l.kind ~= 'sliding_log'
end

-- The ledger to write with an admission of `cost` at `at` under `l` over `before` (nil: none). Folds
-- the leading entries whose instant has come into the base: they can no longer be waited for.
local function ledger_after(l, before, at)
  if not kept(l) then return nil end
  local ledger = before ~= nil and before.ledger ~= nil and ledger_read(before.ledger) or nil
  if ledger == nil then
    if at <= 0 then return nil end
    ledger = { entries = {}, limit = l }
    if before ~= nil then ledger.base = { t = before.t, a = before.a, b = before.b } end
  end
  ledger.entries[#ledger.entries + 1] = { at = at, cost = cost }
  while #ledger.entries > 0 and ledger.entries[1].at <= 0 do
    local base, limit = ledger_apply(ledger.limit, ledger.base, table.remove(ledger.entries, 1))
    if base == false then return nil end
    ledger.base, ledger.limit = base, limit
  end
  if not ledger_ahead(ledger) or #ledger.entries > MAX_ENTRIES then return nil end
  return ledger_text(ledger)
end

-- The ledger of `state`, moved to limit `to` at `at` (nil: none, or one that cannot follow).
local function ledger_moved(state, to, at)
  if state == nil or state.ledger == nil or to == nil or not kept(to) then return nil end
  local ledger = ledger_read(state.ledger)
  if ledger == nil then return nil end
  ledger.entries[#ledger.entries + 1] = { at = at, to = to }
  return ledger_text(ledger)
end

-- The state with the admission of `cost` at `at` taken out, the rest replayed, and its ledger; nil when
-- the state's ledger cannot say (none, no such admission, or no wait ahead any more): given back by
-- the algorithm's own rule.
local function ledger_give_back(l, state, at)
  if state == nil or state.ledger == nil or not kept(l) then return nil end
  local ledger = ledger_read(state.ledger)
  if ledger == nil or not ledger_ahead(ledger) then return nil end
  local found
  for k = #ledger.entries, 1, -1 do
    local e = ledger.entries[k]
    if e.cost and e.at == at and e.cost == cost then
      found = k
      break
    end
  end
  if not found then return nil end
  table.remove(ledger.entries, found)
  local replayed, limit = ledger.base, ledger.limit
  for _, e in ipairs(ledger.entries) do
    replayed, limit = ledger_apply(limit, replayed, e)
    if replayed == false then return nil end
  end
  return replayed or { t = 0, a = 0, b = 0 }, ledger_ahead(ledger) and ledger_text(ledger) or nil
end

-- One decision: what `KEYS` and `ARGV` (see the head of this file) ask, atomically.
-- A decision's reply (see "Reply" above), before the reports: numbers go back as integer replies, exact,
-- as every one is a whole number below 2^53.
local function reply_of(allowed, wait, retry, written, refused_by)
  if allowed then return { 1, wait, 0, now_s, now_ns, written, '' } end
  return { 0, 0, retry or -1, now_s, now_ns, written, refused_by }
end

-- Appends what limit `l` has left with `state` to `reply`.
local function report_into(reply, l, state)
  local remaining, reset, next_ns = l.algorithm.report(l, state)
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset
  reply[#reply + 1] = next_ns
end

-- Limits by their signature, parsed once per library load (a Redis Function's definitions run once; by
-- EVALSHA, on every call): a compact call names its limit by signature alone. A server sees few
-- signatures; the table starts over past `MAX_CACHED` all the same.
local MAX_CACHED = 1000
local limits_by_sig, cached = {}, 0
local function limit_named(sig)
  local l = limits_by_sig[sig]
  if l == nil then
    l = limit_of_sig(sig)
    if l == nil then return nil end
    if cached >= MAX_CACHED then limits_by_sig, cached = {}, 0 end
    limits_by_sig[sig], cached = l, cached + 1
  elseif l.kind == 'sliding_window' then
    l.phase = (mulmod(now_s, E9, l.p2) + now_ns) % l.p2
  end
  return l
end

-- Sets `now` from a ManualClock's reading (`s`, `ns`), or from Redis's TIME when `s` is nil or empty.
local function set_now(s, ns)
  manual = s ~= nil and s ~= ''
  if not manual then
    local time = redis.call('TIME')
    now_s, now_ns = tonumber(time[1]), tonumber(time[2]) * 1000
  else
    now_s, now_ns = tonumber(s), tonumber(ns)
  end
  now_ms = now_s * 1000 + floor(now_ns / 1000000)
end

local decide_full

-- The common decision, called in its compact form (src/backend/script.rs `compact`): one rate limit
-- (any algorithm but concurrency permits), decided now (no wait, nothing to replay), by 4 arguments
-- instead of 20: cost, operation ("0" | "1"), what a state written
-- now has seen ("<node>/<head>"), the limit's signature; then a ManualClock's now_s, now_ns, if any.
-- It decides in one pass, as the general path does, on a state this limit wrote with no waits ahead (or
-- none): no tables of limits and states, no closures, no ledger. Anything else (another type of key, a
-- state another limit wrote, a ledger) goes, before writing, to the general path, with the arguments
-- the compact ones stand for.
local function decide_compact(KEYS, ARGV)
  set_now(ARGV[5], ARGV[6])
  local l = limit_named(ARGV[4])
  if l == nil then return redis.error_reply('ratekeeper: unknown limit ' .. tostring(ARGV[4])) end
  cost, max_wait, operation, seen_text = tonumber(ARGV[1]), 0, ARGV[2], ARGV[3]
  want_report = operation == '1'
  local key = KEYS[1]
  local state, plain
  if l.kind == 'sliding_log' then
    -- (Its stamps are its ledger: a log has no other.)
    local metas = redis.pcall('ZRANGEBYSCORE', key, -1, -1)
    plain = metas.err == nil
    if plain then
      state = log_load(key, metas)
      plain = state.meta == nil or state.sig == l.sig
    end
  else
    local raw = redis.pcall('GET', key)
    plain = type(raw) ~= 'table' and l.algorithm.store == nil
    if plain and raw then
      state = parse_state(raw)
      plain = state ~= nil and state.ledger == nil and state.sig == l.sig
    end
  end
  if not plain then
    local node, head = string.match(seen_text, '^(.*)/(%d+)$')
    local full = { ARGV[5] or '', ARGV[6] or '', ARGV[1], '0', 'all', operation, 'rates', '', '0', node, head, '1' }
    for field in string.gmatch(ARGV[4], '[^,]+') do full[#full + 1] = field end
    full[#full + 1] = '0'
    return decide_full(KEYS, full, true)
  end
  local admitted, retry = nil, nil
  if cost <= l.burst then admitted, retry = l.algorithm.evaluate(l, state, 0) end
  local reply
  if admitted then
    if l.algorithm.store then
      state = l.algorithm.store(l, key, admitted)
    else
      store(l, key, admitted, nil, state)
      state = admitted
    end
    reply = reply_of(true, 0, nil, 1, '')
  else
    reply = reply_of(false, 0, retry, 0, 'rate')
  end
  if want_report then report_into(reply, l, state) end
  return reply
end

-- `timed`: `now` is set already (a compact call that came this way).
decide_full = function(KEYS, ARGV, timed)
  if not timed then set_now(ARGV[1], ARGV[2]) end
  cost = tonumber(ARGV[3])
  max_wait = tonumber(ARGV[4])
  policy = ARGV[5]
  operation = ARGV[6]
  want_report = operation == '1' or operation == 'peek'
  take = ARGV[7]
  lease = ARGV[8]
  lease_ttl = tonumber(ARGV[9])
  node = ARGV[10]
  head = tonumber(ARGV[11])
  n = tonumber(ARGV[12])
  seen_text = node .. '/' .. str(head)

  local limits, states, moved = {}, {}, {}
  for i = 1, n do
    local l = limit_at(ARGV, 12 + (i - 1) * 7)
    if l == nil or l.algorithm == nil then
      return redis.error_reply('ratekeeper: unknown algorithm ' .. tostring(ARGV[12 + (i - 1) * 7 + 1]))
    end
    limits[i] = l
    states[i] = load_any(l, KEYS[i])
  end

  -- A lease's unused units given back ("return:<i>,<s>,<ns>,<a>/...", `cost` the units): to each limit i
  -- whose state is still the one the lease wrote (its instant s.ns, for GCRA its remainder a, and the
  -- limit it was written under: the lease's, which the call names), so that only units nobody else was
  -- granted after come back. Before any move: a state moved to another limit counts them as used.
  local returning = string.match(operation, '^return:(.*)$')
  if returning then
    local written = 0
    for i, s, ns, a in string.gmatch(returning, '(%d+),(%d+),(%d+),(%d+)') do
      i = tonumber(i)
      local l, state = limits[i], states[i]
      local at = (tonumber(s) - now_s) * E9 + (tonumber(ns) - now_ns)
      if l ~= nil and state ~= nil and not state.log and state.sig == l.sig and state.t == at and state.ledger == nil then
        local back
        if l.kind == 'gcra' and state.a == tonumber(a) then
          back = algorithms.gcra.give_back(l, state)
        elseif l.kind == 'windows' then
          back = { t = state.t, a = math.min(state.a + cost, l.p1), b = state.b }
        elseif l.kind == 'sliding_window' then
          back = { t = state.t, a = math.max(0, state.a - cost), b = state.b }
        end
        if back then
          store(l, KEYS[i], back, nil, state)
          written = written + 2 ^ (i - 1)
        end
      end
    end
    return { str(written) }
  end

  -- The moves this limiter made that each state has not seen, in order, each at its instant.
  -- A limit past the group's current ones (KEYS[i], i > n) is one the group no longer has: its moves end
  -- in its removal, and its key goes.
  local moves_at = 12 + n * 7
  local gone = {}
  for k = 1, tonumber(ARGV[moves_at + 1]) do
    local base = moves_at + 1 + (k - 1) * 17
    local i, seq, at = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
    local from, to = limit_at(ARGV, base + 3), limit_at(ARGV, base + 10)
    if i > n and gone[i] == nil then gone[i] = load_any(from, KEYS[i]) or false end
    local state
    if i > n then state = gone[i] or nil else state = states[i] end
    if state ~= nil and (i > n or limits[i].kind ~= 'concurrency') then
      -- A limit or group that is gone takes its states whatever they were written under.
      if unseen(seq, state) and (to == nil or state.sig == from.sig) then
        local after = move(from, to, state, at, KEYS[i], node .. '/' .. str(seq))
        if after ~= nil and i <= n then after.ledger = ledger_moved(state, to, at) end
        if i > n then gone[i] = after or false else states[i], moved[i] = after, true end
      end
    end
  end
  for i, state in pairs(gone) do
    if state then redis.call('DEL', KEYS[i]) end
  end
  for i = 1, n do
    local l, state = limits[i], states[i]
    -- Written under another limit than the moves say (another limiter's, or before the moves kept):
    -- moved now; a state whose limit is unknown starts afresh.
    if state ~= nil and l.kind ~= 'concurrency' and state.sig ~= l.sig then
      local from = limit_of_sig(state.sig)
      if from ~= nil and (from.kind == 'sliding_log') == (state.log == true) then
        states[i] = move(from, l, state, 0, KEYS[i], seen_now())
      else
        redis.call('DEL', KEYS[i])
        states[i] = nil
      end
      moved[i] = true
    end
    if l.kind == 'sliding_log' and states[i] == nil then states[i] = log_load(KEYS[i]) end
  end

  -- Writes the states that moved and that `written` (a bit per limit) did not write.
  local function persist_moved(written)
    for i in pairs(moved) do
      if floor(written / 2 ^ (i - 1)) % 2 == 0 then
        local l = limits[i]
        if l.kind == 'sliding_log' then
          -- (An empty log has no key: nothing to write.)
          if states[i].meta ~= nil then algorithms.sliding_log.store(l, KEYS[i], { at = 0, cost = 0, moved = true }) end
        elseif states[i] == nil then
          redis.call('DEL', KEYS[i])
        else
          store(l, KEYS[i], states[i], states[i].ledger)
        end
      end
    end
  end
  if operation == 'move' then
    persist_moved(0)
    return { '1' }
  end

  -- A release: this node's concurrency permits ("release").
  if operation == 'release' then
    for i = 1, n do
      local l = limits[i]
      if l.kind == 'concurrency' then l.algorithm.store(l, KEYS[i], { release = cost }) end
    end
    persist_moved(0)
    return { '1' }
  end
  -- A give-back: a handler's manual reduction ("reduce": every limit under "all", the last one under "fallback"),
  -- or the refund of a cancelled wait's slot ("refund:<written>:<s>:<ns>": the limits that took it and the
  -- slot's instant on this script's clock, as its decision replied it). A key with no state has nothing to give back.
  local refunded_bits, slot_s, slot_ns = string.match(operation, '^refund:(%d+):(%d+):(%d+)$')
  if refunded_bits then
    -- The slot's instant, relative to now like every instant here.
    max_wait = (tonumber(slot_s) - now_s) * E9 + (tonumber(slot_ns) - now_ns)
  end
  if operation == 'reduce' or refunded_bits then
    local written, given = tonumber(refunded_bits or '0'), 0
    local last_rate = 0
    for i = 1, n do
      if limits[i].kind ~= 'concurrency' then last_rate = i end
    end
    for i = 1, n do
      local bit = floor(written / 2 ^ (i - 1)) % 2 == 1
      local take
      local gate = limits[i].kind == 'concurrency'
      if refunded_bits then take = bit elseif policy == 'fallback' then take = i == last_rate else take = not gate end
      if take and not gate and states[i] ~= nil then
        local l = limits[i]
        -- A reduction gives back to the key's newest window (src/algorithm/mod.rs `reduce`).
        local at = max_wait
        if not refunded_bits and l.kind == 'windows' then at = states[i].t - 1 end
        -- A reduction takes a sliding log's newest stamps, reserved ones included (as in memory).
        if not refunded_bits and l.kind == 'sliding_log' then at = nil end
        local refunded, ledger
        if refunded_bits then refunded, ledger = ledger_give_back(l, states[i], at) end
        if refunded then
          store(l, KEYS[i], refunded, ledger)
          given = given + 2 ^ (i - 1)
        else
          refunded = l.algorithm.refund(l, states[i], at)
          -- Nothing given back (a reduction older than the key's windows): the state and its waits' ledger stay
          -- as they are, as in memory, where an unchanged state keeps its ledger (src/limiter/waits.rs).
          local s = states[i]
          if refunded and l.kind ~= 'sliding_log' and refunded.t == s.t and refunded.a == s.a and refunded.b == s.b then
            refunded = nil
          end
          if refunded then
            (l.algorithm.store or store)(l, KEYS[i], refunded)
            given = given + 2 ^ (i - 1)
          end
        end
      end
    end
    persist_moved(given)
    return { '1' }
  end

  -- A server's word ("cap:<limits>:<reset_ns>:<age_ns>", `cost` the remaining): the fixed windows named (a
  -- bit each) end `reset_ns` from now with at most `cost` permits, heard for a request admitted `age_ns` ago;
  -- a GCRA named has at most `cost` left and is full again no sooner than `reset_ns` from now.
  local capped_bits, reset_ns, age_ns = string.match(operation, '^cap:(%d+):(%d+):(%d+)$')
  if capped_bits then
    local written, before = 0, nil
    for i = 1, n do
      if floor(tonumber(capped_bits) / 2 ^ (i - 1)) % 2 == 1 then
        local capped, had
        if limits[i].kind == 'gcra' then
          capped, had = gcra_cap(limits[i], states[i], cost, tonumber(reset_ns))
        else
          capped, had = windows_cap(limits[i], states[i], cost, tonumber(reset_ns), -tonumber(age_ns))
        end
        if capped then
          store(limits[i], KEYS[i], capped)
          written = written + 2 ^ (i - 1)
          if before == nil or had < before then before = had end
        end
      end
    end
    persist_moved(written)
    -- Taken, and what the windows had left before it (lease mode: the units of a lease granted before the
    -- word may be spent only as far as they fit under it beside those).
    if written > 0 then return { '1', tostring(before) } end
    return { '0' }
  end

  -- What limit i says at `at`: its new state, or nil and the retry (nil: never, a cost above its burst).
  local function evaluate_one(i, at)
    if cost > limits[i].burst then return nil, nil end
    return limits[i].algorithm.evaluate(limits[i], states[i], at)
  end

  -- The limits `take` names at `at` (src/limiter/decide.rs `evaluate`): the states to write, or nil, the
  -- retry (nil: never) and what refused ("concurrency": the permits, which waiting does not release).
  local function evaluate(at)
    local writes, rates = {}, false
    for i = 1, n do
      if limits[i].kind == 'concurrency' then
        if take ~= 'rates' then
          local admitted, r = evaluate_one(i, at)
          if not admitted then return nil, r, 'concurrency' end
          writes[i] = admitted
        end
      else
        rates = true
      end
    end
    if take == 'permits' or not rates then return writes end
    if policy == 'fallback' then
      local retry = nil
      for i = 1, n do
        if limits[i].kind ~= 'concurrency' then
          local admitted, r = evaluate_one(i, at)
          if admitted then
            writes[i] = admitted
            return writes
          end
          if r ~= nil and (retry == nil or r < retry) then retry = r end
        end
      end
      return nil, retry, 'rate'
    end
    local retry, refused, never = 0, false, false
    for i = 1, n do
      if limits[i].kind ~= 'concurrency' then
        local admitted, r = evaluate_one(i, at)
        if admitted then
          writes[i] = admitted
        elseif r == nil then
          never = true
        else
          refused = true
          retry = math.max(retry, r)
        end
      end
    end
    if never then return nil, nil, 'rate' end
    if refused then return nil, retry, 'rate' end
    return writes
  end

  -- A lease ("lease:<most>", `cost` the least): as many units as the limits `take` names admit now (rates,
  -- or concurrency permits as members named by `lease`), at least `cost` and at most `most`, taken at once
  -- for the caller to spend on its own (src/store/leased.rs). Replies as
  -- a decision with reports, then the units granted and each limit's state written (t relative to now, a),
  -- from which the caller knows when each unit lapses.
  local most = string.match(operation, '^lease:(%d+)$')
  if most then
    most = tonumber(most)
    local writes, r, by = evaluate(0)
    local granted = 0
    if writes then
      granted = cost
      local high = math.max(cost, most)
      while granted < high do
        cost = floor((granted + high + 1) / 2)
        local more = evaluate(0)
        if more then
          granted, writes = cost, more
        else
          high = cost - 1
        end
      end
      cost = granted
    end
    local written = 0
    for i, state in pairs(writes or {}) do
      local l = limits[i]
      if l.algorithm.store then
        -- Concurrency permits ("permits"): the lease's members, named by its prefix.
        states[i] = l.algorithm.store(l, KEYS[i], state) or state
      else
        store(l, KEYS[i], state, ledger_after(l, states[i], 0))
        states[i] = state
      end
      written = written + 2 ^ (i - 1)
    end
    persist_moved(written)
    local reply = reply_of(writes ~= nil, 0, r, written, by or '')
    for i = 1, n do report_into(reply, limits[i], states[i]) end
    reply[#reply + 1] = granted
    for i = 1, n do
      local state = states[i]
      if state ~= nil and not state.log and state.t ~= nil then
        reply[#reply + 1] = state.t
        reply[#reply + 1] = state.a or 0
      else
        reply[#reply + 1] = 0
        reply[#reply + 1] = 0
      end
    end
    return reply
  end


  -- Now, or for a waiter the first instant every limit admits (src/limiter/decide.rs `decide_group`).
  local allowed, wait, retry, written, refused_by = false, 0, nil, 0, ''
  for _ = 1, 8 do
    local writes, r, by = evaluate(wait)
    refused_by = by or ''
    if writes and operation == 'peek' then
      -- A look: what would be decided, the states left as they are (the report is of them).
      allowed = true
      break
    end
    if writes then
      for i, state in pairs(writes) do
        local l = limits[i]
        if l.algorithm.store then
          states[i] = l.algorithm.store(l, KEYS[i], state) or state
        else
          store(l, KEYS[i], state, ledger_after(l, states[i], wait))
          states[i] = state
        end
        written = written + 2 ^ (i - 1)
      end
      allowed = true
      break
    end
    if r == nil or by == 'concurrency' then
      -- Never (a cost above a burst), or the permits: waiting does not help.
      retry = r
      break
    end
    retry = wait + r
    if retry > max_wait then break end
    wait = retry
  end

  -- A moved state is kept even when nothing was admitted: the move happens once, as in memory.
  persist_moved(written)

  local reply = reply_of(allowed, wait, retry, written, refused_by)
  if want_report then
    for i = 1, n do report_into(reply, limits[i], states[i]) end
  end
  return reply
end

-- Standing shares (src/backend/standing.rs): KEYS[1] the pool, a hash: "born" (ms it was made), "fp" (the
-- settings of its holders), "floor" (ms: no slot is free before it, after a change of settings),
-- "h<i>" = "<expiry ms> <node>" (slot i's holder), "c<i>" (ms: its keys start empty then, from its
-- claim), "f<i>" (ms: slot i's last holder spent no later).
-- ARGV: "standing", "hold" | "release", node, fingerprint, shares, ttl ms, a ManualClock's ms ("": TIME).
-- Reply { slot, free_in_ms (ms from now until the slot's last holder has stopped: its keys start empty
-- then), "claimed" | "renewed" } | { 0, "", why none }: a renewal says it again, so that a process that
-- hears its calls' replies out of order never needs the claim's first. A pool made now (a restart lost it)
-- frees no slot before a time to live has passed: a holder from before may spend until then.
local function standing(KEYS, ARGV)
  local pool, op, me, fp = KEYS[1], ARGV[2], ARGV[3], ARGV[4]
  local shares, ttl = tonumber(ARGV[5]), tonumber(ARGV[6])
  local now
  if ARGV[7] ~= '' then
    now = tonumber(ARGV[7])
  else
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local raw = redis.call('HGETALL', pool)
  local f = {}
  for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
  local born = tonumber(f.born)
  if not born then
    born = now
    redis.call('HSET', pool, 'born', string.format('%d', born))
  end
  local floor_ms = math.max(tonumber(f.floor) or 0, born + ttl)
  -- Holders whose time ran out free their slot as of their expiry.
  local live, others, mine, latest = {}, 0, nil, floor_ms
  for name, value in pairs(f) do
    local i = string.match(name, '^h(%d+)$')
    if i then
      local exp, node = string.match(value, '^(%d+) (.*)$')
      exp = tonumber(exp)
      if exp > now then
        live[tonumber(i)] = true
        if node == me then mine = tonumber(i) else others = others + 1 end
      else
        local free = math.max(exp, tonumber(f['f' .. i]) or 0)
        redis.call('HDEL', pool, name)
        redis.call('HSET', pool, 'f' .. i, string.format('%d', free))
        f['f' .. i] = tostring(free)
      end
      latest = math.max(latest, exp)
    else
      local j = string.match(name, '^f(%d+)$')
      if j then latest = math.max(latest, tonumber(value)) end
    end
  end
  if f.fp ~= fp then
    if others > 0 then
      return { '0', '', 'other settings' }
    end
    -- New settings: no slot is free before every holder of the old ones has stopped.
    for name, _ in pairs(f) do
      if string.match(name, '^[hcf]%d+$') then redis.call('HDEL', pool, name) end
    end
    redis.call('HSET', pool, 'fp', fp, 'floor', string.format('%d', latest))
    floor_ms, live, mine, f = latest, {}, nil, {}
  end
  if not manual_pool then redis.call('PEXPIRE', pool, 2 * ttl) end
  if op == 'release' then
    if mine then
      redis.call('HDEL', pool, 'h' .. mine)
      redis.call('HSET', pool, 'f' .. mine, string.format('%d', now))
    end
    return { '0', '', 'released' }
  end
  local holder = string.format('%d', now + ttl) .. ' ' .. me
  if mine then
    -- Never earlier than a renewal before it said: a call that arrives late (a retry, two on their way)
    -- must not end a share its holder counts on.
    local exp = tonumber(string.match(f['h' .. mine], '^(%d+) '))
    if exp < now + ttl then redis.call('HSET', pool, 'h' .. mine, holder) end
    local free = tonumber(f['c' .. mine]) or floor_ms
    return { tostring(mine), string.format('%d', free - now), 'renewed' }
  end
  for i = 1, shares do
    if not live[i] then
      local free = math.max(tonumber(f['f' .. i]) or 0, floor_ms)
      redis.call('HSET', pool, 'h' .. i, holder, 'c' .. i, string.format('%d', free))
      return { tostring(i), string.format('%d', free - now), 'claimed' }
    end
  end
  return { '0', '', 'full' }
end

-- The compact form has at most 6 arguments, the full one at least 20.
local function decide(KEYS, ARGV)
  floor = math.floor
  if ARGV[1] == 'standing' then
    manual_pool = ARGV[7] ~= ''
    return standing(KEYS, ARGV)
  end
  if #ARGV <= 6 then return decide_compact(KEYS, ARGV) end
  return decide_full(KEYS, ARGV)
end
