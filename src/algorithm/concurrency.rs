//! Concurrency permits: at most N requests in flight per key, held for the request's
//! duration. State: `a` = permits in use; `t` = `u64::MAX` while any is, so the store never drops a
//! key with requests in flight.

use super::State;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    permits: u64,
}

impl Concurrency {
    /// The constants `src/backend/decide.lua` takes: permits.
    #[must_use]
    pub const fn params(&self) -> [u64; 5] {
        [self.permits, 0, 0, 0, 0]
    }

    #[must_use]
    pub fn new(permits: u32) -> Self {
        Self { permits: u64::from(permits) }
    }

    /// Takes `cost` permits. A refusal has no known retry time: it is when a request finishes (0).
    ///
    /// # Errors
    /// 0 when the permits are all in use.
    #[allow(clippy::cast_possible_truncation)]
    pub fn acquire(&self, state: &State, cost: u64) -> Result<State, u64> {
        let in_use = u64::from(state.a) + cost;
        if in_use > self.permits {
            return Err(0);
        }
        Ok(State { t: u64::MAX, a: in_use as u32, b: 0 })
    }

    #[must_use]
    #[allow(clippy::cast_possible_truncation)]
    pub fn release(&self, state: &State, cost: u64) -> State {
        let in_use = u64::from(state.a).saturating_sub(cost);
        State { t: if in_use == 0 { 0 } else { u64::MAX }, a: in_use as u32, b: 0 }
    }

    #[must_use]
    pub fn available(&self, state: &State) -> u64 {
        self.permits.saturating_sub(u64::from(state.a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_taken_and_given_back() {
        let c = Concurrency::new(2);
        let one = c.acquire(&State::default(), 1).unwrap();
        let two = c.acquire(&one, 1).unwrap();
        assert_eq!(c.acquire(&two, 1), Err(0));
        assert!(!two.is_idle(u64::MAX - 1));
        let back = c.release(&c.release(&two, 1), 1);
        assert!(back.is_idle(0));
        assert_eq!(c.available(&back), 2);
    }
}
