//! What a rate-limited server says about its limits, read from one response's headers: the reader
//! behind `ratekeeper._server_words` and the outgoing transports (plain Rust; the boundary is
//! `python/outgoing.rs`).
//!
//! Servers speak one of a few dialects (IETF `RateLimit`, Anthropic, `OpenAI`, GitHub, the generic
//! `X-RateLimit-*`); [`read`] turns any of them into the same [`Budget`] list and `Retry-After` wait.
//! Nothing a server says is trusted: a value that is malformed, missing, negative, not finite,
//! non-ASCII or absurdly large drops only the budget (or wait) it belongs to, and is reported as a
//! [`Warning`] (the caller logs it once per dialect and field). Nothing here panics on any input.
//!
//! Structured fields (RFC 8941/9651) are parsed by the `sfv` crate and HTTP dates by `httpdate`;
//! the rest (Go durations, RFC 3339 timestamps, plain numbers) are the small grammars the old Python
//! reader matched with regular expressions, read the same way. `httpdate` is stricter than the
//! Python reader was in three ways, all of them dates a server should not send: the weekday must be
//! the date's, a leap second (`:60`) is refused, and so is a year before 1970.

use std::borrow::Cow;
use std::time::UNIX_EPOCH;

use smallvec::SmallVec;

/// The most a remaining count is read as: a larger one is clamped (it caps nothing anyway).
pub const MOST_REMAINING: u64 = 4_294_967_295;
/// A wait or reset beyond a day is taken for a server's mistake (or a unit mix-up), not obeyed.
pub const LONGEST_WAIT: f64 = 86_400.0;

/// The dialects a response can speak, in the order [`read`] looks for them when none is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    Ietf,
    Anthropic,
    OpenAi,
    GitHub,
    XRateLimit,
}

impl Dialect {
    /// Every dialect, in the order they are looked for.
    pub const ALL: [Self; 5] = [Self::Ietf, Self::Anthropic, Self::OpenAi, Self::GitHub, Self::XRateLimit];

    /// Its name as Python spells it (`"ietf"`, `"openai"`, ...).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Ietf => "ietf",
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
            Self::GitHub => "github",
            Self::XRateLimit => "x-ratelimit",
        }
    }

    /// The dialect of that name.
    #[must_use]
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// The names of the fields the reader keeps, lower case; a field is its index here.
pub const FIELD_NAMES: [&str; FIELDS] = [
    "ratelimit",
    "ratelimit-policy",
    "retry-after",
    "retry-after-ms",
    "date",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-reset-after",
    "x-ratelimit-resource",
    "x-github-request-id",
    // OpenAI: limit, remaining, reset of each kind.
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    // Anthropic: the same of each kind.
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
];
/// How many fields the reader keeps.
pub const FIELDS: usize = 29;
// `Said` marks the fields present in a u32.
const _: () = assert!(FIELDS <= 32);

const RATELIMIT: usize = 0;
const POLICY: usize = 1;
const RETRY_AFTER: usize = 2;
const RETRY_AFTER_MS: usize = 3;
const DATE: usize = 4;
const GENERIC_LIMIT: usize = 5;
const GENERIC_REMAINING: usize = 6;
const GENERIC_RESET: usize = 7;
const GENERIC_RESET_AFTER: usize = 8;
const RESOURCE: usize = 9;
const GITHUB_REQUEST_ID: usize = 10;
const OPENAI: usize = 11;
const ANTHROPIC: usize = 17;
const OPENAI_KINDS: [&str; 2] = ["requests", "tokens"];
const ANTHROPIC_KINDS: [&str; 4] = ["requests", "tokens", "input-tokens", "output-tokens"];
/// The longest name kept (`anthropic-ratelimit-output-tokens-remaining`).
const LONGEST_NAME: usize = 43;

/// The field a lower-case header name is, if the reader keeps it.
#[must_use]
pub fn field_of(lower: &[u8]) -> Option<usize> {
    // Every header of every response of the outgoing transports is looked up here: one slot of a table
    // and one comparison, a few bytes of code (a match on the 29 names compiled to a tree of comparisons
    // spread over dozens of cache lines, fetched anew on every reply).
    if lower.len() < SHORTEST_NAME {
        return None;
    }
    let field = usize::from(FIELD_SLOTS[field_slot(lower)]).checked_sub(1)?;
    (FIELD_NAMES[field].as_bytes() == lower).then_some(field)
}

/// The length of the shortest name kept (`date`).
const SHORTEST_NAME: usize = 4;

/// Where a name of at least [`SHORTEST_NAME`] bytes is in [`FIELD_SLOTS`]: a hash of its length and two
/// of its bytes that no two names kept share (checked as the table is built, when the crate compiles).
const fn field_slot(name: &[u8]) -> usize {
    let len = name.len();
    (len * 28 + name[len - 3] as usize * 7 + name[len / 2] as usize) % SLOTS
}

const SLOTS: usize = 64;

/// Each name's field + 1 at its slot, 0 elsewhere.
#[allow(clippy::cast_possible_truncation)] // a field is below FIELDS (29)
const FIELD_SLOTS: [u8; SLOTS] = {
    let mut slots = [0u8; SLOTS];
    let mut field = 0;
    while field < FIELDS {
        let slot = field_slot(FIELD_NAMES[field].as_bytes());
        assert!(slots[slot] == 0, "two field names share a slot of FIELD_SLOTS: change field_slot");
        slots[slot] = (field + 1) as u8;
        field += 1;
    }
    slots
};

/// The field a header name is, in any ASCII case (as bytes are lowered: a name out of ASCII is none).
#[must_use]
pub fn field_of_raw(name: &[u8]) -> Option<usize> {
    // Most headers are passed over at their length or first byte (`| 0x20` lowers exactly the four
    // letters' capitals here), before any lowering; a name in lower case (httpx's, requests', most
    // servers') is found as it is.
    let first = name.first()? | 0x20;
    if name.len() > LONGEST_NAME || !matches!(first, b'x' | b'a' | b'r' | b'd') {
        return None;
    }
    if let Some(field) = field_of(name) {
        return Some(field);
    }
    if !name.iter().any(u8::is_ascii_uppercase) {
        return None;
    }
    let mut lower = [0u8; LONGEST_NAME];
    let lower = &mut lower[..name.len()];
    for (to, from) in lower.iter_mut().zip(name) {
        *to = from.to_ascii_lowercase();
    }
    field_of(lower)
}

/// The field a header name is, in any case (lowered as Python's `str.lower` does).
#[must_use]
pub fn field_of_name(name: &str) -> Option<usize> {
    if name.is_ascii() {
        field_of_raw(name.as_bytes())
    } else {
        field_of(name.to_lowercase().as_bytes())
    }
}

/// The rate-limit fields of one response, a repeated one's values joined with `", "` (RFC 9110 5.3: a
/// repeated field is one list; for a single-valued field that makes the value malformed, as it
/// should). Values are borrowed from the headers where they can be, kept in the order first seen:
/// nothing is allocated for a reply of up to [`INLINE_VALUES`] fields (the outgoing transports read
/// one per call), and the whole is a few cache lines, where a slot for each of the 29 fields was eleven.
#[derive(Debug, Default, Clone)]
pub struct Said<'a> {
    /// Bit `f` is set when field `f` is there.
    present: u32,
    /// Where field `f`'s value is in `values`, when present.
    slot: [u8; FIELDS],
    values: SmallVec<[Cow<'a, str>; INLINE_VALUES]>,
}

/// How many fields [`Said`] holds before it allocates: the replies of GitHub and `OpenAI` fit.
pub const INLINE_VALUES: usize = 10;

impl<'a> Said<'a> {
    /// No fields yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `value` of `field` (an index of [`FIELD_NAMES`]), after any earlier one.
    pub fn add(&mut self, field: usize, value: impl Into<Cow<'a, str>>) {
        if field >= FIELDS {
            return;
        }
        let bit = 1 << field;
        if self.present & bit == 0 {
            // At most FIELDS (29) values are kept.
            #[allow(clippy::cast_possible_truncation)]
            {
                self.slot[field] = self.values.len() as u8;
            }
            self.values.push(value.into());
            self.present |= bit;
        } else if let Some(earlier) = self.values.get_mut(usize::from(self.slot[field])) {
            let earlier = earlier.to_mut();
            earlier.push_str(", ");
            earlier.push_str(&value.into());
        }
    }

    /// Keeps `value` of the header `name` (any case) if it is a rate-limit field.
    pub fn add_named(&mut self, name: &str, value: impl Into<Cow<'a, str>>) {
        if let Some(field) = field_of_name(name) {
            self.add(field, value);
        }
    }

    /// The value of `field`, if the response has it.
    #[must_use]
    pub fn get(&self, field: usize) -> Option<&str> {
        if field >= FIELDS || self.present & (1 << field) == 0 {
            return None;
        }
        self.values.get(usize::from(self.slot[field])).map(|v| &**v)
    }

    fn has(&self, field: usize) -> bool {
        self.get(field).is_some()
    }

    fn has_any(&self, fields: impl IntoIterator<Item = usize>) -> bool {
        fields.into_iter().any(|f| self.has(f))
    }

    /// Whether no field was kept.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.present == 0
    }

    /// Whether the response's only field is `Date`, which says nothing by itself.
    const fn has_only_date(&self) -> bool {
        self.present == 1 << DATE
    }

    /// (name, value) of each field kept, in [`FIELD_NAMES`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> + use<'_, 'a> {
        FIELD_NAMES.iter().enumerate().filter_map(|(field, name)| Some((*name, self.get(field)?)))
    }
}

/// One of a server's quotas as it stands after a response.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// `"requests"`, `"tokens"`, ..., the IETF policy's name, or GitHub's resource.
    pub name: Cow<'static, str>,
    /// What is left of it, 0 to [`MOST_REMAINING`].
    pub remaining: u64,
    /// Seconds from the response until more of it is available, 0 to [`LONGEST_WAIT`].
    pub reset_after: f64,
    /// Its size, when the server states it.
    pub limit: Option<u64>,
    /// Its window in seconds, when stated (IETF `RateLimit-Policy` `w`).
    pub window: Option<f64>,
}

/// All a response says about the server's limits.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Word {
    /// The dialect it was read in; `None` when it carries none.
    pub dialect: Option<Dialect>,
    /// Its budgets, in the order the dialect lists them.
    pub budgets: Vec<Budget>,
    /// Seconds to wait before the next call (`Retry-After`, `OpenAI`'s `retry-after-ms`) on 429 and
    /// 503, and on GitHub's 403; `None` when absent, malformed or not read for that status.
    pub retry_after: Option<f64>,
}

impl Word {
    /// Whether the word says anything: a budget or a wait.
    #[must_use]
    pub fn says_anything(&self) -> bool {
        !self.budgets.is_empty() || self.retry_after.is_some()
    }
}

/// A value ignored, for the caller to log once per dialect and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub dialect: Option<Dialect>,
    pub field: &'static str,
    /// The value as the server sent it; `None` for a missing field.
    pub value: Option<String>,
    pub why: String,
}

/// What the response with the fields `said` and `status` says about the server's limits. `now` is the
/// client's wall clock (epoch seconds) when it arrived: absolute resets are taken relative to the
/// response's `Date` when it has a valid one, `now` only when it has none. `dialect`: read only that
/// dialect; `None`: the first of [`Dialect::ALL`] the response carries. Values ignored are pushed on
/// `warnings`.
#[must_use]
pub fn read(said: &Said<'_>, status: i64, now: f64, dialect: Option<Dialect>, warnings: &mut Vec<Warning>) -> Word {
    if said.is_empty() || said.has_only_date() {
        return Word { dialect, ..Word::default() };
    }
    let dialect = dialect.or_else(|| dialect_of(said));
    let mut reading = Reading { said, dialect, now, reference: None, warnings };
    let budgets = match dialect {
        None => Vec::new(),
        Some(Dialect::Ietf) => read_ietf(&mut reading),
        Some(Dialect::Anthropic) => read_kinds(&mut reading, ANTHROPIC, &ANTHROPIC_KINDS, rfc3339_reset),
        Some(Dialect::OpenAi) => read_kinds(&mut reading, OPENAI, &OPENAI_KINDS, duration_reset),
        Some(Dialect::GitHub) => read_github(&mut reading),
        Some(Dialect::XRateLimit) => read_generic(&mut reading),
    };
    let waits = status == 429 || status == 503 || (status == 403 && dialect == Some(Dialect::GitHub));
    let retry_after = if waits { reading.retry_after() } else { None };
    if dialect.is_none() && retry_after.is_none() {
        return Word::default();
    }
    Word { dialect, budgets, retry_after }
}

/// The first dialect whose fields `said` holds.
fn dialect_of(said: &Said<'_>) -> Option<Dialect> {
    if said.has(RATELIMIT) {
        Some(Dialect::Ietf)
    } else if said.has_any(ANTHROPIC..ANTHROPIC + 12) {
        Some(Dialect::Anthropic)
    } else if said.has_any(OPENAI..OPENAI + 6) {
        Some(Dialect::OpenAi)
    } else if said.has_any([RESOURCE, GITHUB_REQUEST_ID]) {
        Some(Dialect::GitHub)
    } else if said.has_any(GENERIC_LIMIT..=GENERIC_RESET_AFTER) {
        Some(Dialect::XRateLimit)
    } else {
        None
    }
}

/// One response's fields being read in one dialect, with the server's clock worked out at most once.
struct Reading<'a, 's> {
    said: &'a Said<'s>,
    dialect: Option<Dialect>,
    now: f64,
    reference: Option<f64>,
    warnings: &'a mut Vec<Warning>,
}

/// A reset reader: the seconds until the reset that the value of a field names, or `None` (warned).
type ResetParser = fn(&mut Reading<'_, '_>, usize, &str) -> Option<f64>;

impl Reading<'_, '_> {
    fn warn(&mut self, field: usize, value: Option<&str>, why: impl Into<String>) {
        self.warnings.push(Warning {
            dialect: self.dialect,
            field: FIELD_NAMES[field],
            value: value.map(str::to_owned),
            why: why.into(),
        });
    }

    /// The moment the response was made, in epoch seconds: its `Date` when valid (the server's own
    /// clock, the one its absolute resets are on), else `now`.
    fn reference(&mut self) -> f64 {
        if let Some(reference) = self.reference {
            return reference;
        }
        let mut reference = self.now;
        if let Some(value) = self.said.get(DATE) {
            if let Some(moment) = http_date(value) {
                reference = moment;
            } else {
                let why = "not an HTTP date; absolute times are taken from the client's clock";
                self.warn(DATE, Some(value), why);
            }
        }
        self.reference = Some(reference);
        reference
    }

    /// Seconds from the response to the epoch `moment`; 0.0 when it has passed (the reset happened).
    fn until(&mut self, moment: f64, field: usize, value: &str) -> Option<f64> {
        let seconds = moment - self.reference();
        self.wait(if seconds > 0.0 { seconds } else { 0.0 }, field, value)
    }

    fn wait(&mut self, seconds: f64, field: usize, value: &str) -> Option<f64> {
        // Written so that NaN fails too.
        if (0.0..=LONGEST_WAIT).contains(&seconds) {
            return Some(seconds);
        }
        self.warn(field, Some(value), "not a wait of 0 to 86400 seconds");
        None
    }

    /// The whole number in `field`: `None` when absent or malformed (warned when malformed, or when a
    /// `remaining` count is absent: its budget is dropped). A count above [`MOST_REMAINING`] is
    /// malformed, except a `remaining` count, which is clamped.
    fn count(&mut self, field: usize, remaining: bool) -> Option<u64> {
        let said = self.said;
        let Some(value) = said.get(field) else {
            if remaining {
                self.warn(field, None, "missing, so the budget it belongs to is dropped");
            }
            return None;
        };
        let digits = py_strip(value);
        if !is_whole(digits) {
            self.warn(field, Some(value), "not a whole number of 0 or more");
            return None;
        }
        let number = if digits.len() <= 10 { digits.parse::<u64>().ok() } else { None };
        match number {
            Some(n) if n <= MOST_REMAINING => Some(n),
            _ if remaining => Some(MOST_REMAINING),
            _ => {
                self.warn(field, Some(value), format!("above {MOST_REMAINING}"));
                None
            }
        }
    }

    /// Seconds until `field`'s reset as `parse` reads it; `None` (warned) when absent or malformed.
    fn reset(&mut self, field: usize, parse: ResetParser) -> Option<f64> {
        let said = self.said;
        let Some(value) = said.get(field) else {
            self.warn(field, None, "missing, so the budget it belongs to is dropped");
            return None;
        };
        parse(self, field, value)
    }

    fn budget(
        &mut self,
        name: Cow<'static, str>,
        (remaining, limit): (usize, usize),
        reset: Option<f64>,
    ) -> Option<Budget> {
        let remaining = self.count(remaining, true);
        let limit = self.count(limit, false);
        Some(Budget { name, remaining: remaining?, reset_after: reset?, limit, window: None })
    }

    /// The wait the server asks for: `OpenAI`'s `retry-after-ms` first (with its fields, or alone), then
    /// `Retry-After` (seconds or an HTTP date); `None` when neither is there and valid.
    fn retry_after(&mut self) -> Option<f64> {
        let said = self.said;
        if matches!(self.dialect, None | Some(Dialect::OpenAi)) {
            if let Some(in_ms) = said.get(RETRY_AFTER_MS) {
                match number(in_ms) {
                    None => self.warn(RETRY_AFTER_MS, Some(in_ms), "not a number of milliseconds"),
                    Some(ms) => {
                        if let Some(wait) = self.asked_wait(ms / 1000.0, RETRY_AFTER_MS, in_ms) {
                            return Some(wait);
                        }
                    }
                }
            }
        }
        let value = said.get(RETRY_AFTER)?;
        if let Some(seconds) = number(value) {
            return self.asked_wait(seconds, RETRY_AFTER, value);
        }
        let Some(moment) = http_date(value) else {
            self.warn(RETRY_AFTER, Some(value), "neither seconds nor an HTTP date");
            return None;
        };
        let seconds = moment - self.reference();
        self.asked_wait(if seconds > 0.0 { seconds } else { 0.0 }, RETRY_AFTER, value)
    }

    /// A wait the server asks for, capped at [`LONGEST_WAIT`]: unlike a reset, which a unit mix-up can
    /// put years away, a long `Retry-After` is a server saying "stop", and retrying it every second
    /// would be the worst reading of it (`None`, warned, only when negative or not finite).
    fn asked_wait(&mut self, seconds: f64, field: usize, value: &str) -> Option<f64> {
        if seconds.is_finite() && seconds > LONGEST_WAIT {
            self.warn(field, Some(value), "longer than a day, so obeyed for a day");
            return Some(LONGEST_WAIT);
        }
        self.wait(seconds, field, value)
    }
}

/// `text` without the whitespace Python's `str.strip` takes away: Unicode's `White_Space`, and the
/// four separators U+001C to U+001F, which Python counts as space too.
#[must_use]
pub fn py_strip(text: &str) -> &str {
    // Most values have nothing to strip: a printable ASCII byte at each end.
    if let (Some(&first), Some(&last)) = (text.as_bytes().first(), text.as_bytes().last()) {
        if (0x21..0x7f).contains(&first) && (0x21..0x7f).contains(&last) {
            return text;
        }
    }
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// One or more ASCII digits, nothing else.
fn is_whole(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// At most `most` ASCII digits at the start of `text`: how many, or `None` past `most`.
fn leading_digits(text: &[u8], most: usize) -> Option<usize> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    (digits <= most).then_some(digits)
}

/// A plain decimal number of 0 or more in ASCII digits (1 to 20 of them, then optionally a point and
/// 1 to 20 more), else `None`.
#[must_use]
pub fn number(value: &str) -> Option<f64> {
    let text = py_strip(value);
    let bytes = text.as_bytes();
    let whole = leading_digits(bytes, 20).filter(|&n| n > 0)?;
    match &bytes[whole..] {
        // A whole number of up to 15 digits is below 2^53, so exact as an f64: added up here, where
        // the float parser's code is hundreds of instructions (resets and counts are whole numbers).
        #[allow(clippy::cast_precision_loss)]
        [] if whole <= 15 => return Some(bytes.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')) as f64),
        [] => {}
        [b'.', fraction @ ..] if !fraction.is_empty() && fraction.len() <= 20 => {
            if !fraction.iter().all(u8::is_ascii_digit) {
                return None;
            }
        }
        _ => return None,
    }
    text.parse().ok()
}

/// Go's `time.Duration` units, in the order a match tries them ("ms" before "m").
const GO_UNITS: [(&str, f64); 8] = [
    ("h", 3600.0),
    ("ms", 1e-3),
    ("m", 60.0),
    ("us", 1e-6),
    ("\u{b5}s", 1e-6),
    ("\u{3bc}s", 1e-6),
    ("ns", 1e-9),
    ("s", 1.0),
];

/// Seconds in a Go duration ("6m0s", "1.5s", "20ms", "100us", "100µs"); a bare number is taken as
/// seconds, as OpenAI-compatible servers (Azure's) send. `None` when it is neither.
#[must_use]
pub fn go_duration(value: &str) -> Option<f64> {
    let text = py_strip(value);
    if let Some(bare) = number(text) {
        return Some(bare);
    }
    if text.chars().count() > 100 {
        return None;
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        // A number: 1 to 20 digits, then optionally a point and 0 to 20 more; or a point and 1 to 20.
        let bytes = rest.as_bytes();
        let whole = leading_digits(bytes, 20)?;
        let mut end = whole;
        if bytes.get(end) == Some(&b'.') {
            let fraction = leading_digits(&bytes[end + 1..], 20)?;
            if whole == 0 && fraction == 0 {
                return None;
            }
            end += 1 + fraction;
        } else if whole == 0 {
            return None;
        }
        let (figure, after) = rest.split_at(end);
        let (unit, scale) = GO_UNITS.iter().find(|(unit, _)| after.starts_with(unit))?;
        total += figure.parse::<f64>().ok()? * scale;
        rest = &after[unit.len()..];
    }
    Some(total)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (years 1 to 9999), `None` when
/// there is no such date.
fn epoch_days(year: i64, month: i64, day: i64) -> Option<i64> {
    if !(1..=9999).contains(&year) || !(1..=12).contains(&month) {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=days_in_month).contains(&day) {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    Some(era * 146_097 + day_of_era - 719_468)
}

/// The epoch second of a UTC date and time, `None` when there is no such date (a leap second, `:60`,
/// is one).
#[allow(clippy::cast_precision_loss)]
fn epoch_seconds(date: (i64, i64, i64), hour: i64, minute: i64, second: f64) -> Option<f64> {
    // Written so that NaN fails too.
    if hour > 23 || minute > 59 || second.is_nan() || second >= 61.0 {
        return None;
    }
    let days = epoch_days(date.0, date.1, date.2)?;
    Some(days as f64 * 86400.0 + hour as f64 * 3600.0 + minute as f64 * 60.0 + second)
}

/// The ASCII digits of `text` as a number (`text` is all digits: the caller checked).
fn digits_value(text: &[u8]) -> i64 {
    text.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0'))
}

/// An RFC 3339 timestamp ("2026-11-27T10:00:30Z", with a fraction or an offset) in epoch seconds.
#[must_use]
pub fn rfc3339(value: &str) -> Option<f64> {
    let bytes = py_strip(value).as_bytes();
    // "YYYY-MM-DDTHH:MM:SS": 19 bytes, digits where the pattern has them.
    let digit_at = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_digit);
    let pattern_ok = bytes.len() >= 20
        && [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18].into_iter().all(digit_at)
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && matches!(bytes[10], b'T' | b't' | b' ')
        && bytes[13] == b':'
        && bytes[16] == b':';
    if !pattern_ok {
        return None;
    }
    let mut at = 19;
    let mut fraction = None;
    if bytes[at] == b'.' {
        let digits = leading_digits(&bytes[at + 1..], usize::MAX)?;
        if digits == 0 || digits > 20 {
            return None;
        }
        // ".5" is a valid float literal; its digits were checked.
        fraction = std::str::from_utf8(&bytes[at..at + 1 + digits]).ok()?.parse::<f64>().ok();
        at += 1 + digits;
    }
    let offset = match &bytes[at..] {
        [b'Z' | b'z'] => None,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] if [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()) => {
            Some((*sign, digits_value(&[*h1, *h2]), digits_value(&[*m1, *m2])))
        }
        _ => return None,
    };
    let field = |from: usize, to: usize| digits_value(&bytes[from..to]);
    #[allow(clippy::cast_precision_loss)]
    let second = field(17, 19) as f64 + fraction.unwrap_or(0.0);
    let moment = epoch_seconds((field(0, 4), field(5, 7), field(8, 10)), field(11, 13), field(14, 16), second)?;
    let Some((sign, hours, minutes)) = offset else { return Some(moment) };
    if hours > 23 || minutes > 59 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let offset = hours as f64 * 3600.0 + minutes as f64 * 60.0;
    // 10:00:30+01:00 is 09:00:30Z: the offset is taken away.
    Some(if sign == b'+' { moment - offset } else { moment + offset })
}

/// An HTTP date (RFC 9110 5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms) in epoch
/// seconds, else `None`; read by `httpdate`. The last one read in each thread is kept: a server's
/// `Date` changes once a second, and nearly every response has one.
#[must_use]
pub fn http_date(value: &str) -> Option<f64> {
    thread_local! {
        static LAST: std::cell::RefCell<(String, Option<f64>)> = const { std::cell::RefCell::new((String::new(), None)) };
    }
    LAST.with(|last| {
        let Ok(mut last) = last.try_borrow_mut() else { return parse_http_date(value) };
        if last.0 != value || last.0.is_empty() {
            let moment = parse_http_date(value);
            last.0.clear();
            last.0.push_str(value);
            last.1 = moment;
        }
        last.1
    })
}

#[allow(clippy::cast_precision_loss)]
fn parse_http_date(value: &str) -> Option<f64> {
    let moment = httpdate::parse_http_date(py_strip(value)).ok()?;
    Some(moment.duration_since(UNIX_EPOCH).ok()?.as_secs() as f64)
}

/// GitHub's reset: the epoch second the window resets at.
fn epoch_reset(reading: &mut Reading<'_, '_>, field: usize, value: &str) -> Option<f64> {
    let Some(moment) = number(value) else {
        reading.warn(field, Some(value), "not epoch seconds");
        return None;
    };
    reading.until(moment, field, value)
}

/// `OpenAI`'s reset: a Go duration from the response.
fn duration_reset(reading: &mut Reading<'_, '_>, field: usize, value: &str) -> Option<f64> {
    let Some(seconds) = go_duration(value) else {
        reading.warn(field, Some(value), "not a Go duration");
        return None;
    };
    reading.wait(seconds, field, value)
}

/// Anthropic's reset: an RFC 3339 timestamp.
fn rfc3339_reset(reading: &mut Reading<'_, '_>, field: usize, value: &str) -> Option<f64> {
    let Some(moment) = rfc3339(value) else {
        reading.warn(field, Some(value), "not an RFC 3339 timestamp");
        return None;
    };
    reading.until(moment, field, value)
}

/// X-RateLimit-Reset's kinds, told apart by size: epoch milliseconds, epoch seconds, else seconds
/// from now.
const EPOCH_MS_ABOVE: f64 = 1e12;
const EPOCH_S_ABOVE: f64 = 1e9;

/// The generic X-RateLimit-Reset: epoch milliseconds, epoch seconds or seconds from now by size, or
/// an HTTP date.
fn any_reset(reading: &mut Reading<'_, '_>, field: usize, value: &str) -> Option<f64> {
    let Some(number) = number(value) else {
        let Some(moment) = http_date(value) else {
            reading.warn(field, Some(value), "neither a number nor an HTTP date");
            return None;
        };
        return reading.until(moment, field, value);
    };
    if number > EPOCH_MS_ABOVE {
        reading.until(number / 1000.0, field, value)
    } else if number > EPOCH_S_ABOVE {
        reading.until(number, field, value)
    } else {
        reading.wait(number, field, value)
    }
}

/// X-RateLimit-Reset-After: seconds from the response.
fn seconds_reset(reading: &mut Reading<'_, '_>, field: usize, value: &str) -> Option<f64> {
    let Some(seconds) = number(value) else {
        reading.warn(field, Some(value), "not a number of seconds");
        return None;
    };
    reading.wait(seconds, field, value)
}

/// `OpenAI`'s and Anthropic's budgets: per kind, the fields `first + 3 * kind` (limit, remaining,
/// reset).
fn read_kinds(reading: &mut Reading<'_, '_>, first: usize, kinds: &[&'static str], parse: ResetParser) -> Vec<Budget> {
    let mut budgets = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        let (limit, remaining, reset) = (first + 3 * k, first + 3 * k + 1, first + 3 * k + 2);
        if !reading.said.has_any([limit, remaining, reset]) {
            continue;
        }
        let reset = reading.reset(reset, parse);
        if let Some(budget) = reading.budget(Cow::Borrowed(kind), (remaining, limit), reset) {
            budgets.push(budget);
        }
    }
    budgets
}

/// A resource name as GitHub writes them (`core`, `search`, `code_scanning_upload`, `graphql`).
fn is_resource(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn read_github(reading: &mut Reading<'_, '_>) -> Vec<Budget> {
    let said = reading.said;
    if !said.has_any([GENERIC_LIMIT, GENERIC_REMAINING, GENERIC_RESET]) {
        return Vec::new(); // a secondary limit's 403 may carry only retry-after
    }
    let mut name = Cow::Borrowed("core");
    if let Some(resource) = said.get(RESOURCE) {
        let stripped = py_strip(resource);
        if !is_resource(stripped) {
            // Counted against the wrong budget would be worse than not counted.
            reading.warn(RESOURCE, Some(resource), "not a resource name, so the budget is dropped");
            return Vec::new();
        }
        // GitHub's usual resource, named without an allocation.
        name = if stripped == "core" { Cow::Borrowed("core") } else { Cow::Owned(stripped.to_owned()) };
    }
    let reset = reading.reset(GENERIC_RESET, epoch_reset);
    reading.budget(name, (GENERIC_REMAINING, GENERIC_LIMIT), reset).into_iter().collect()
}

fn read_generic(reading: &mut Reading<'_, '_>) -> Vec<Budget> {
    let said = reading.said;
    if !said.has_any(GENERIC_LIMIT..=GENERIC_RESET_AFTER) {
        return Vec::new();
    }
    let mut reset = None;
    if said.has(GENERIC_RESET_AFTER) {
        // Relative: no clock to trust, so it goes first.
        reset = reading.reset(GENERIC_RESET_AFTER, seconds_reset);
    }
    if reset.is_none() {
        reset = reading.reset(GENERIC_RESET, any_reset);
    }
    reading.budget(Cow::Borrowed("requests"), (GENERIC_REMAINING, GENERIC_LIMIT), reset).into_iter().collect()
}

/// A member's parameter as a count: an SF Integer of 0 or more (not a Boolean); `None` for any other
/// value.
fn count_of(value: &sfv::BareItemFromInput<'_>) -> Option<u64> {
    value.as_integer().and_then(|i| u64::try_from(i64::from(i)).ok())
}

/// The IETF fields (draft-ietf-httpapi-ratelimit-headers-10): `RateLimit` members, paired by name with
/// `RateLimit-Policy` members for their quota and window. Per the draft's section 7, malformed fields
/// MUST be ignored: a field that does not parse is dropped whole, a member that is not valid alone.
fn read_ietf(reading: &mut Reading<'_, '_>) -> Vec<Budget> {
    let said = reading.said;
    let Some(state) = said.get(RATELIMIT) else { return Vec::new() };
    // name -> (quota, window); the first member of a name wins.
    let mut policies: Vec<(Cow<'_, str>, Option<u64>, Option<u64>)> = Vec::new();
    // The policies whose quota is not in requests (`qu`: content-bytes, concurrent-requests): no call
    // counts in them, so they are not kept.
    let mut not_requests: Vec<Cow<'_, str>> = Vec::new();
    let policy = said.get(POLICY);
    for Member { name, counts: [quota, window], requests } in sfv_members(reading, POLICY, ["q", "w"]) {
        if !requests {
            if !not_requests.contains(&name) {
                let why = format!("policy {} counts a quota unit other than requests", py_repr(&name));
                reading.warn(POLICY, policy, why);
                not_requests.push(name);
            }
            continue;
        }
        if policies.iter().all(|(n, _, _)| *n != name) {
            // Section 3.1.3: w is a non-negative, non-zero Integer.
            policies.push((name, quota.count(), window.count().filter(|&w| w > 0)));
        }
    }
    let mut budgets = Vec::new();
    for Member { name, counts: [remaining, reset], .. } in sfv_members(reading, RATELIMIT, ["r", "t"]) {
        if not_requests.contains(&name) {
            continue;
        }
        let Some(remaining) = remaining.count() else {
            reading.warn(RATELIMIT, Some(state), format!("policy {} has no valid r", py_repr(&name)));
            continue;
        };
        let (limit, window) =
            policies.iter().find(|(n, _, _)| *n == name).map_or((None, None), |(_, quota, window)| (*quota, *window));
        #[allow(clippy::cast_precision_loss)]
        let seconds = match reset {
            // Section 4.1: t is OPTIONAL, and absent it is not 0: 4.2's example 'r=999;pk=...' is "a
            // partition key that has no time window reset". So no more quota comes sooner than the
            // policy's window (when stated, more is reallocated by its end, section 2) or, with none,
            // than the longest wait obeyed.
            Param::Absent => window.map_or(LONGEST_WAIT, |w| (w as f64).min(LONGEST_WAIT)),
            Param::Count(reset) if reset as f64 <= LONGEST_WAIT => reset as f64,
            Param::Count(_) | Param::NotCount => {
                let why =
                    format!("policy {} has a t that is not a whole number of seconds from 0 to 86400", py_repr(&name));
                reading.warn(RATELIMIT, Some(state), why);
                continue;
            }
        };
        #[allow(clippy::cast_precision_loss)]
        budgets.push(Budget {
            name: Cow::Owned(name.into_owned()),
            remaining: remaining.min(MOST_REMAINING),
            reset_after: seconds,
            limit: limit.filter(|&l| l <= MOST_REMAINING),
            window: window.map(|w| w as f64),
        });
    }
    budgets
}

/// A parameter [`sfv_members`] was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Param {
    Absent,
    /// Present, not a count (an SF Integer of 0 or more).
    NotCount,
    Count(u64),
}

impl Param {
    const fn count(self) -> Option<u64> {
        if let Self::Count(count) = self {
            Some(count)
        } else {
            None
        }
    }
}

/// A member of an IETF field's SF List: its name, and each parameter [`sfv_members`] was asked for.
struct Member<'de> {
    name: Cow<'de, str>,
    counts: [Param; 2],
    /// Whether its quota is in requests: no `qu` parameter, or `qu="requests"`.
    requests: bool,
}

/// The members of an SF List with the counts of two parameters (`keys`), read by the `sfv` crate's
/// visitors: no map of every member's parameters is built, and names are borrowed from the value.
struct Members<'de> {
    keys: [&'static str; 2],
    found: Vec<Member<'de>>,
    /// An inner list or a member not named by a string was passed over.
    skipped: bool,
}

impl<'de> sfv::visitor::ListVisitor<'de> for Members<'de> {
    type Out = Self;
    type Error = std::convert::Infallible;

    fn entry(&mut self) -> Result<impl sfv::visitor::EntryVisitor<'de>, Self::Error> {
        Ok(MemberVisitor { members: self, counts: [Param::Absent; 2], name: None, requests: true })
    }

    fn finish(self) -> Result<Self, Self::Error> {
        Ok(self)
    }
}

/// One member of [`Members`], while it is parsed.
struct MemberVisitor<'m, 'de> {
    members: &'m mut Members<'de>,
    name: Option<Cow<'de, str>>,
    counts: [Param; 2],
    requests: bool,
}

impl<'de> sfv::visitor::EntryVisitor<'de> for MemberVisitor<'_, 'de> {
    type Error = std::convert::Infallible;

    fn item(self) -> Result<impl sfv::visitor::ItemVisitor<'de>, Self::Error> {
        Ok(self)
    }

    fn inner_list(self) -> Result<impl sfv::visitor::InnerListVisitor<'de>, Self::Error> {
        self.members.skipped = true;
        Ok(sfv::visitor::Ignored)
    }
}

impl<'de> sfv::visitor::ItemVisitor<'de> for MemberVisitor<'_, 'de> {
    type Out = ();
    type Error = std::convert::Infallible;

    fn bare_item(
        mut self,
        bare_item: sfv::BareItemFromInput<'de>,
    ) -> Result<impl sfv::visitor::ParameterVisitor<'de, Out = ()>, Self::Error> {
        self.name = match bare_item {
            sfv::GenericBareItem::String(Cow::Borrowed(text)) => Some(Cow::Borrowed(text.as_str())),
            sfv::GenericBareItem::String(Cow::Owned(text)) => Some(Cow::Owned(text.into())),
            sfv::GenericBareItem::Token(token) => Some(Cow::Borrowed(token.as_str())),
            sfv::GenericBareItem::DisplayString(text) => Some(text),
            _ => None,
        };
        Ok(self)
    }
}

impl<'de> sfv::visitor::ParameterVisitor<'de> for MemberVisitor<'_, 'de> {
    type Out = ();
    type Error = std::convert::Infallible;

    fn parameter(&mut self, key: &'de sfv::KeyRef, value: sfv::BareItemFromInput<'de>) -> Result<(), Self::Error> {
        // A key given twice: the last one counts (RFC 9651 4.2.3.2).
        if let Some(at) = self.members.keys.iter().position(|k| *k == key.as_str()) {
            self.counts[at] = count_of(&value).map_or(Param::NotCount, Param::Count);
        } else if key.as_str() == "qu" {
            // A unit named by a String or a Token; one of another type is malformed, left aside.
            self.requests = match &value {
                sfv::GenericBareItem::String(unit) => unit.as_str() == "requests",
                sfv::GenericBareItem::Token(unit) => unit.as_str() == "requests",
                _ => self.requests,
            };
        }
        Ok(())
    }

    fn finish(self) -> Result<(), Self::Error> {
        match self.name {
            Some(name) if !name.is_empty() => {
                self.members.found.push(Member { name, counts: self.counts, requests: self.requests });
            }
            _ => self.members.skipped = true,
        }
        Ok(())
    }
}

/// The members of the SF List in `field`, each with the counts of the parameters `keys`; none
/// (warned) when it does not parse. Inner lists and members not named by a string (a String, Token
/// or Display String, not empty) are skipped (warned).
fn sfv_members<'a>(reading: &mut Reading<'a, '_>, field: usize, keys: [&'static str; 2]) -> Vec<Member<'a>> {
    let said = reading.said;
    let Some(value) = said.get(field) else { return Vec::new() };
    let members = Members { keys, found: Vec::with_capacity(1), skipped: false };
    let Ok(members) = sfv::Parser::new(value).parse_list_with_visitor(members) else {
        reading.warn(field, Some(value), "not a structured field list");
        return Vec::new();
    };
    if members.skipped {
        reading.warn(field, Some(value), "a member is not a named item");
    }
    members.found
}

/// A string as Python's `repr` writes it (for the warnings' text).
#[must_use]
pub fn py_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = std::fmt::Write::write_fmt(&mut out, format_args!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said<'a>(pairs: &[(&str, &'a str)]) -> Said<'a> {
        let mut said = Said::new();
        for (name, value) in pairs {
            said.add_named(name, *value);
        }
        said
    }

    fn heard(pairs: &[(&str, &str)], status: i64, now: f64) -> (Word, Vec<Warning>) {
        let mut warnings = Vec::new();
        let word = read(&said(pairs), status, now, None, &mut warnings);
        (word, warnings)
    }

    fn budget(name: &str, remaining: u64, reset_after: f64, limit: Option<u64>) -> Budget {
        Budget { name: Cow::Owned(name.to_owned()), remaining, reset_after, limit, window: None }
    }

    #[test]
    fn every_field_is_kept_past_the_inline_slots_and_a_repeated_one_joined_in_order() {
        let mut said = Said::new();
        // Every field once, then each again: the later fields spill past the inline slots.
        for (field, name) in FIELD_NAMES.iter().enumerate() {
            said.add(field, (*name).to_owned());
        }
        for field in (0..FIELDS).rev() {
            said.add(field, "again");
        }
        said.add(FIELDS, "no such field");
        for (field, name) in FIELD_NAMES.iter().enumerate() {
            assert_eq!(said.get(field), Some(format!("{name}, again").as_str()));
        }
        assert_eq!(said.get(FIELDS), None);
        assert_eq!(said.iter().count(), FIELDS);
        assert!(Said::new().is_empty() && Said::new().get(0).is_none());
    }

    #[test]
    fn names_are_found_in_any_case_and_others_passed_over() {
        assert_eq!(field_of_raw(b"X-RateLimit-Remaining"), Some(GENERIC_REMAINING));
        assert_eq!(field_of_name("RATELIMIT-POLICY"), Some(POLICY));
        assert_eq!(field_of_raw(b"content-type"), None);
        assert_eq!(field_of_raw(b"anthropic-ratelimit-output-tokens-remaining-and-more"), None);
        // The Kelvin sign lowers to "k", as Python's str.lower has it.
        assert_eq!(field_of_name("anthropic-ratelimit-to\u{212a}ens-limit"), Some(ANTHROPIC + 3));
        assert_eq!(FIELD_NAMES.iter().map(|n| n.len()).max(), Some(LONGEST_NAME));
    }

    #[test]
    fn field_of_finds_every_name() {
        for (field, name) in FIELD_NAMES.iter().enumerate() {
            assert_eq!(field_of(name.as_bytes()), Some(field), "{name}");
            assert_eq!(field_of_raw(name.to_ascii_uppercase().as_bytes()), Some(field), "{name}");
        }
        for other in
            ["", "x", "da", "dat", "x-ratelimit", "ratelimit-", "content-type", "x-ratelimit-limit-requestsx", "dates"]
        {
            assert_eq!(field_of(other.as_bytes()), None, "{other}");
        }
        for len in 0..64 {
            assert_eq!(field_of(&vec![b'x'; len]), None);
        }
    }

    #[test]
    fn github_docs_example() {
        let (word, warnings) = heard(
            &[
                ("Date", "Mon, 01 Jul 2013 17:27:06 GMT"),
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "4966"),
                ("x-ratelimit-used", "34"),
                ("x-ratelimit-reset", "1372700873"),
                ("x-ratelimit-resource", "core"),
            ],
            200,
            0.0,
        );
        assert_eq!(word.dialect, Some(Dialect::GitHub));
        assert_eq!(word.budgets, vec![budget("core", 4966, 1247.0, Some(5000))]);
        assert!(warnings.is_empty());
    }

    #[test]
    fn openai_resets_are_go_durations() {
        for (text, seconds) in [
            ("6m0s", 360.0),
            ("1.5s", 1.5),
            ("20ms", 0.02),
            ("1h2m3.5s", 3723.5),
            ("100us", 100.0 * 1e-6),
            ("100\u{b5}s", 100.0 * 1e-6),
            ("7.2", 7.2),
            ("+1.s", 1.0),
            (".5s", 0.5),
        ] {
            assert_eq!(go_duration(text), Some(seconds), "{text}");
        }
        for text in ["", "+", "5", "5x", "1..5s", "s", "1e5s", "-1s", "123456789012345678901s", ".s"] {
            if text == "5" {
                continue;
            }
            assert_eq!(go_duration(text), None, "{text}");
        }
    }

    #[test]
    fn numbers_are_plain_ascii_decimals() {
        assert_eq!(number(" 42 "), Some(42.0));
        assert_eq!(number("1.25"), Some(1.25));
        // Whole numbers are added up below 16 digits, parsed above: the same values either way.
        for text in ["0", "007", "1764000000", "999999999999999", "9999999999999999", "12345678901234567890"] {
            assert_eq!(number(text), text.parse::<f64>().ok(), "{text}");
        }
        for text in ["", "1.", ".5", "-1", "1e5", "nan", "inf", "\u{661}", "1_0", "123456789012345678901"] {
            assert_eq!(number(text), None, "{text}");
        }
    }

    #[test]
    fn rfc3339_timestamps_with_fractions_and_offsets() {
        assert_eq!(rfc3339("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(rfc3339("1970-01-01T01:00:30+01:00"), Some(30.0));
        assert_eq!(rfc3339("1970-01-01 00:00:00.5z"), Some(0.5));
        assert_eq!(rfc3339("2000-02-29T00:00:00-00:30"), Some(951_782_400.0 + 1800.0));
        for text in ["1970-01-01T00:00:00", "2001-02-29T00:00:00Z", "0000-01-01T00:00:00Z", "1970-01-01T24:00:00Z"] {
            assert_eq!(rfc3339(text), None, "{text}");
        }
    }

    #[test]
    fn http_dates_in_the_three_forms() {
        let at = Some(784_111_777.0);
        assert_eq!(http_date("Sun, 06 Nov 1994 08:49:37 GMT"), at);
        assert_eq!(http_date("Sunday, 06-Nov-94 08:49:37 GMT"), at);
        assert_eq!(http_date(" Sun Nov  6 08:49:37 1994 "), at);
        assert_eq!(http_date("Sun, 06 Nov 1994 08:49:37 GMT, 5"), None);
        assert_eq!(http_date("Mon, 06 Nov 1994 08:49:37 GMT"), None); // not that date's weekday
    }

    #[test]
    fn ietf_policies_in_another_unit_than_requests_are_not_kept() {
        let pairs = [
            ("ratelimit-policy", "\"bytes\";q=1000;w=4;qu=\"content-bytes\", \"calls\";q=10;w=4;qu=requests"),
            ("ratelimit", "\"bytes\";r=900;t=3, \"calls\";r=9;t=3"),
        ];
        let (word, warnings) = heard(&pairs, 200, 0.0);
        let calls = Budget { window: Some(4.0), ..budget("calls", 9, 3.0, Some(10)) };
        assert_eq!(word.budgets, vec![calls]);
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].why, "policy 'bytes' counts a quota unit other than requests");
    }

    #[test]
    fn ietf_members_pair_with_their_policies() {
        let (word, warnings) =
            heard(&[("RateLimit", "\"api\";r=42;t=18, b;r=1"), ("RateLimit-Policy", "\"api\";q=100;w=60")], 200, 0.0);
        assert_eq!(word.dialect, Some(Dialect::Ietf));
        assert_eq!(
            word.budgets,
            vec![
                Budget { window: Some(60.0), ..budget("api", 42, 18.0, Some(100)) },
                budget("b", 1, LONGEST_WAIT, None),
            ]
        );
        assert!(warnings.is_empty());
        let (word, warnings) = heard(&[("RateLimit", "(a b);r=1, \"a\";r=?1")], 200, 0.0);
        assert_eq!(word.budgets, vec![]);
        assert_eq!(warnings.len(), 2);
    }

    #[test]
    fn retry_after_on_429_and_503_only() {
        let pairs = [("Retry-After", "Fri, 27 Nov 2026 10:00:30 GMT"), ("Date", "Fri, 27 Nov 2026 10:00:00 GMT")];
        assert_eq!(heard(&pairs, 429, 0.0).0, Word { dialect: None, budgets: vec![], retry_after: Some(30.0) });
        assert_eq!(heard(&pairs, 200, 0.0).0, Word::default());
        let (word, warnings) = heard(&[("retry-after", "soon")], 503, 0.0);
        assert_eq!(word, Word::default());
        assert_eq!(warnings[0].why, "neither seconds nor an HTTP date");
        // OpenAI's retry-after-ms alone, without the budgets' fields, and before a Retry-After.
        let alone = [("retry-after-ms", "1500"), ("retry-after", "9")];
        assert_eq!(heard(&alone, 429, 0.0).0, Word { dialect: None, budgets: vec![], retry_after: Some(1.5) });
        // A wait of more than a day is obeyed for a day (warned), where a reset that far is dropped.
        for long in [[("retry-after", "172800")], [("retry-after-ms", "9e99")], [("retry-after-ms", "172800000")]] {
            let (word, warnings) = heard(&long, 429, 0.0);
            let capped = !long[0].1.contains('e');
            assert_eq!(word.retry_after, capped.then_some(LONGEST_WAIT), "{long:?}");
            assert_eq!(warnings.len(), 1);
        }
    }

    #[test]
    fn bad_values_drop_their_budget_and_are_warned() {
        let (word, warnings) = heard(&[("x-ratelimit-remaining", "-1"), ("x-ratelimit-reset", "9")], 200, 0.0);
        assert_eq!(word, Word { dialect: Some(Dialect::XRateLimit), budgets: vec![], retry_after: None });
        assert_eq!(warnings[0].field, "x-ratelimit-remaining");
        let (word, _) = heard(&[("x-ratelimit-remaining", "99999999999"), ("x-ratelimit-reset", "9")], 200, 0.0);
        assert_eq!(word.budgets, vec![budget("requests", MOST_REMAINING, 9.0, None)]);
    }

    #[test]
    fn python_repr_quotes_as_python_does() {
        assert_eq!(py_repr("api"), "'api'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a'\"b\\"), "'a\\'\"b\\\\'");
    }
}
