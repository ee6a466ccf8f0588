//! The Lua budgets run in Redis, each script one atomic step on Redis's clock.

/// The UTC day and month of Redis's clock, and the milliseconds until each ends: the same
/// civil-calendar arithmetic as `period.rs`, so both backends agree on when a period ends.
const CALENDAR: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dayms = 86400000
local day = math.floor(now / dayms)
local z = day + 719468
local era = math.floor(z / 146097)
local doe = z - era * 146097
local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
local mp = math.floor((5 * doy + 2) / 153)
local m = mp < 10 and mp + 3 or mp - 9
local y = yoe + era * 400 + (m <= 2 and 1 or 0)
local month = y * 12 + m - 1
local ny, nm = math.floor((month + 1) / 12), (month + 1) % 12 + 1
if nm <= 2 then ny = ny - 1 end
local nera = math.floor(ny / 400)
local nyoe = ny - nera * 400
local nmp = nm > 2 and nm - 3 or nm + 9
local ndoe = nyoe * 365 + math.floor(nyoe / 4) - math.floor(nyoe / 100) + math.floor((153 * nmp + 2) / 5)
local day_reset = (day + 1) * dayms - now
local month_reset = (nera * 146097 + ndoe - 719468) * dayms - now
"#;

/// The body of [`reserve`]: checks the day's and the month's budget, then reserves in both,
/// or refuses without reserving anything.
///
/// KEYS: the day's counter, the month's (each suffixed here by its period's number), and
/// this request's marker. ARGV: amount (micro-USD), day and month budgets (-1 for none),
/// marker TTL (ms), and how long past its period a counter lives (ms). The marker holds
/// `amount:day:month`, so a second run for the same request answers as the first did
/// without reserving twice, and the settlement knows what to undo and where.
///
/// Returns `{admitted, reason, day spent, month spent, ms to day's end, ms to month's end}`.
const RESERVE_BODY: &str = r#"
local amount, dlimit, mlimit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local dkey, mkey = KEYS[1] .. ':' .. day, KEYS[2] .. ':' .. month
local dspent = tonumber(redis.call('GET', dkey) or '0')
local mspent = tonumber(redis.call('GET', mkey) or '0')
local function answer(ok, why, d, m) return {ok, why, d, m, day_reset, month_reset} end
if redis.call('EXISTS', KEYS[3]) == 1 then return answer(1, 'ok', dspent, mspent) end
if mlimit >= 0 and amount > mlimit then return answer(0, 'never_month', dspent, mspent) end
if dlimit >= 0 and amount > dlimit then return answer(0, 'never_day', dspent, mspent) end
if mlimit >= 0 and mspent + amount > mlimit then return answer(0, 'month', dspent, mspent) end
if dlimit >= 0 and dspent + amount > dlimit then return answer(0, 'day', dspent, mspent) end
local grace = tonumber(ARGV[5])
redis.call('INCRBY', dkey, ARGV[1])
redis.call('PEXPIRE', dkey, day_reset + grace)
redis.call('INCRBY', mkey, ARGV[1])
redis.call('PEXPIRE', mkey, month_reset + grace)
redis.call('SET', KEYS[3], ARGV[1] .. ':' .. day .. ':' .. month, 'PX', ARGV[4])
return answer(1, 'ok', dspent + amount, mspent + amount)
"#;

/// The reservation script: [`CALENDAR`] then [`RESERVE_BODY`].
pub fn reserve() -> String {
    format!("{CALENDAR}{RESERVE_BODY}")
}

/// Replaces a reservation by the request's real cost, in the periods it was made in (a
/// counter already expired stays gone), then marks it settled. A second run for the same
/// request finds it settled and does nothing, so a retry after a lost reply is safe.
///
/// KEYS: the day's counter, the month's (unsuffixed), the marker. ARGV: the cost
/// (micro-USD), and how long a settled marker lives (ms). Returns 1 if it settled.
pub const SETTLE: &str = r#"
local held = redis.call('GET', KEYS[3])
if not held or held == 'settled' then return 0 end
local amount, day, month = string.match(held, '^(%d+):(%d+):(%d+)$')
if not amount then return 0 end
local delta = tonumber(ARGV[1]) - tonumber(amount)
for _, key in ipairs({KEYS[1] .. ':' .. day, KEYS[2] .. ':' .. month}) do
  if redis.call('EXISTS', key) == 1 then
    local left = redis.call('INCRBY', key, string.format('%d', delta))
    -- Never below zero: a counter that expired and began again holds less than was undone.
    if left < 0 then redis.call('INCRBY', key, string.format('%d', -left)) end
  end
end
redis.call('SET', KEYS[3], 'settled', 'PX', ARGV[2])
return 1
"#;
