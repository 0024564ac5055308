//! Virtual-or-real time as plain data: the core never reads a clock.

use std::fmt;
use std::ops::{Add, AddAssign};
use std::time::Duration;

/// A point in time, in milliseconds since an origin chosen by whoever drives the core
/// (process start for the binary, zero for a simulation).
///
/// The core only ever receives `Time` as an argument; it never asks the operating
/// system what time it is. Arithmetic saturates instead of panicking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

impl Time {
    /// The origin.
    pub const ZERO: Time = Time(0);

    /// A time `millis` milliseconds after the origin.
    #[must_use]
    pub const fn from_millis(millis: u64) -> Self {
        Time(millis)
    }

    /// Milliseconds since the origin.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// How long after `earlier` this time is; zero when `earlier` is later.
    #[must_use]
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// This time plus `d`, saturating at the far future.
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Time {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(ms))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, rhs: Duration) -> Time {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Time {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Time::from_millis(5).saturating_since(Time::from_millis(9)), Duration::ZERO);
        assert_eq!(Time::from_millis(9).saturating_since(Time::from_millis(5)), Duration::from_millis(4));
        assert_eq!(Time::from_millis(u64::MAX - 1) + Duration::from_secs(1), Time::from_millis(u64::MAX));
        assert_eq!(Time::ZERO + Duration::from_millis(1500), Time::from_millis(1500));
    }
}
