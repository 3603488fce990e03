//! Timestamps: UTC, microsecond precision, one fixed-width RFC 3339 text form
//! (`2026-11-30T09:16:27.123456Z`) used in the database, the API and the views,
//! so that text order is time order on both backends.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use serde::{Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{OffsetDateTime, UtcOffset};

/// A point in time, normalized to UTC and whole microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(OffsetDateTime);

const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z");

impl Timestamp {
    /// Normalizes any instant to UTC microseconds.
    pub fn from_datetime(at: OffsetDateTime) -> Timestamp {
        let at = at.to_offset(UtcOffset::UTC);
        let micros = at.microsecond();
        Timestamp(at.replace_microsecond(micros).unwrap_or(at))
    }

    /// Parses any RFC 3339 timestamp (as typed by a person or a client).
    pub fn parse_rfc3339(raw: &str) -> Option<Timestamp> {
        OffsetDateTime::parse(raw, &Rfc3339)
            .ok()
            .map(Timestamp::from_datetime)
    }

    /// Parses the fixed form written by [`Timestamp::to_text`] (or any RFC 3339).
    pub fn parse_text(raw: &str) -> Option<Timestamp> {
        Timestamp::parse_rfc3339(raw)
    }

    /// The fixed-width text form.
    pub fn to_text(&self) -> String {
        self.0
            .format(FORMAT)
            .unwrap_or_else(|_| "0000-00-00T00:00:00.000000Z".to_owned())
    }

    /// RFC 3339 with whole seconds when there are no fractional seconds, as
    /// used inside proposals (`2026-12-31T00:00:00Z`).
    pub fn to_proposal_text(&self) -> String {
        self.0.format(&Rfc3339).unwrap_or_else(|_| self.to_text())
    }

    /// The wrapped instant.
    pub fn datetime(&self) -> OffsetDateTime {
        self.0
    }

    /// This instant plus `seconds`.
    pub fn plus_seconds(&self, seconds: i64) -> Timestamp {
        Timestamp(self.0 + time::Duration::seconds(seconds))
    }

    /// This instant plus `duration`, to the microsecond.
    pub fn plus(&self, duration: std::time::Duration) -> Timestamp {
        Timestamp(self.0 + duration)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// Where "now" comes from: the system clock, shifted by an offset that only
/// a debug build can set (tests move time forward to reach an expiry). A
/// release build has no way to set it: the offset is always zero there.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    offset_micros: Arc<AtomicI64>,
}

impl Clock {
    /// The current time, normalized.
    pub fn now(&self) -> Timestamp {
        let now = Timestamp::from_datetime(OffsetDateTime::now_utc());
        match self.offset_micros.load(Ordering::Relaxed) {
            0 => now,
            micros => Timestamp(now.0 + time::Duration::microseconds(micros)),
        }
    }

    /// Moves this clock (and every copy of it) forward by `seconds`.
    #[cfg(debug_assertions)]
    pub fn advance(&self, seconds: i64) {
        self.offset_micros
            .fetch_add(seconds.saturating_mul(1_000_000), Ordering::Relaxed);
    }
}

/// Every clock is the same setting: configurations compare equal whatever
/// their test offset.
impl PartialEq for Clock {
    fn eq(&self, _: &Clock) -> bool {
        true
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_width_and_ordered() {
        let a = Timestamp::parse_rfc3339("2026-11-30T10:00:00.5+01:00").unwrap();
        assert_eq!(a.to_text(), "2026-11-30T09:00:00.500000Z");
        let b = Timestamp::parse_rfc3339("2026-11-30T09:00:00.45Z").unwrap();
        assert!(b < a);
        assert!(b.to_text() < a.to_text());
        assert_eq!(Timestamp::parse_text(&a.to_text()), Some(a));
    }

    #[test]
    fn plus_keeps_fractions_of_a_second() {
        let t = Timestamp::parse_rfc3339("2026-12-31T00:00:00Z").unwrap();
        let later = t.plus(std::time::Duration::from_millis(800));
        assert_eq!(later.to_text(), "2026-12-31T00:00:00.800000Z");
    }

    #[test]
    fn proposal_text_keeps_whole_seconds() {
        let t = Timestamp::parse_rfc3339("2026-12-31T00:00:00Z").unwrap();
        assert_eq!(t.to_proposal_text(), "2026-12-31T00:00:00Z");
    }
}
