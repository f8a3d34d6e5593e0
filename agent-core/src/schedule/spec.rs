//! When a schedule ticks: a cron expression read in a time zone, or a fixed interval.
//!
//! Cron expressions are parsed by `croner` and evaluated on `chrono` date-times in a
//! `chrono-tz` zone, whose IANA database is compiled in: every worker computes the same
//! ticks whatever its host's zoneinfo says, which the tick's derived run id relies on.
//!
//! Daylight-saving transitions follow croner (the Open Cron Pattern Specification, as
//! Vixie cron does): a fixed time of day that does not exist on the spring-forward day
//! (02:30 in Europe/Berlin on the last Sunday of March) ticks once, at the first instant
//! after the gap (03:00 local); a fixed time of day that occurs twice on the fall-back day
//! ticks once, at its first occurrence. Wildcard and stepped fields tick at every real
//! instant that matches: none in the skipped hour, both passes of the repeated one.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use serde::{Deserialize, Serialize};

use crate::store::Millis;

/// When a schedule ticks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ScheduleSpec {
    /// A cron expression (five fields, or six with seconds first; `@daily` and the other
    /// nicknames), read on the wall clock of an IANA time zone.
    Cron {
        /// The expression, `30 2 * * *` for 02:30 every day.
        expression: String,
        /// The IANA name of the zone the expression is read in (`Europe/Berlin`, `UTC`).
        time_zone: String,
    },
    /// Every `every_ms` milliseconds, counted from `anchor_ms` (Unix milliseconds): the
    /// ticks are `anchor_ms + k * every_ms`, so they do not drift with late workers.
    Interval {
        /// The period, in milliseconds (at least one second).
        #[cfg_attr(feature = "openapi", schema(minimum = 1000))]
        #[serde(deserialize_with = "super::integer::u64")]
        every_ms: u64,
        /// A tick time the others are counted from.
        #[serde(default, deserialize_with = "super::integer::i64")]
        anchor_ms: Millis,
    },
}

/// The shortest interval a schedule may tick at: a tick is a few writes and a run.
pub const MIN_INTERVAL_MS: u64 = 1000;

/// Why a schedule's spec is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The cron expression does not parse.
    #[error("malformed cron expression `{expression}`: {reason}")]
    MalformedCron {
        /// The expression as given.
        expression: String,
        /// What croner says is wrong with it.
        reason: String,
    },
    /// The time zone is not an IANA zone name.
    #[error("unknown time zone `{0}`: use an IANA name such as `Europe/Berlin` or `UTC`")]
    UnknownTimeZone(String),
    /// An interval shorter than [`MIN_INTERVAL_MS`].
    #[error("an interval of {0} ms is too short: at least {MIN_INTERVAL_MS} ms")]
    IntervalTooShort(u64),
    /// The expression never matches a time after the given one (`0 0 30 2 *`).
    #[error("cron expression `{0}` never ticks")]
    NeverTicks(String),
}

/// A spec checked once, ready to compute ticks.
#[derive(Debug, Clone)]
pub enum Ticks {
    /// A parsed cron expression in its zone.
    Cron(Box<Cron>, Tz),
    /// A fixed interval from its anchor.
    Interval {
        /// The period, ms.
        every: i64,
        /// A tick time.
        anchor: Millis,
    },
}

impl ScheduleSpec {
    /// The spec parsed, or why it cannot tick.
    ///
    /// # Errors
    /// [`SpecError`] naming what is wrong: a malformed expression, an unknown zone, an
    /// interval under a second.
    pub fn ticks(&self) -> Result<Ticks, SpecError> {
        match self {
            Self::Cron {
                expression,
                time_zone,
            } => {
                let zone = Tz::from_str(time_zone)
                    .map_err(|_| SpecError::UnknownTimeZone(time_zone.clone()))?;
                let cron = Cron::from_str(expression).map_err(|e| SpecError::MalformedCron {
                    expression: expression.clone(),
                    reason: e.to_string(),
                })?;
                Ok(Ticks::Cron(Box::new(cron), zone))
            }
            Self::Interval {
                every_ms,
                anchor_ms,
            } => {
                if *every_ms < MIN_INTERVAL_MS {
                    return Err(SpecError::IntervalTooShort(*every_ms));
                }
                Ok(Ticks::Interval {
                    every: i64::try_from(*every_ms).unwrap_or(i64::MAX),
                    anchor: *anchor_ms,
                })
            }
        }
    }

    /// Check the spec, and that it ticks at least once after `now`.
    ///
    /// # Errors
    /// As [`ticks`](Self::ticks), and [`SpecError::NeverTicks`].
    pub fn validate(&self, now: Millis) -> Result<(), SpecError> {
        let ticks = self.ticks()?;
        match (self, ticks.next_after(now)) {
            (Self::Cron { expression, .. }, None) => Err(SpecError::NeverTicks(expression.clone())),
            _ => Ok(()),
        }
    }
}

impl Ticks {
    /// The first tick strictly after `after` (Unix milliseconds), `None` when there is
    /// none (a cron expression that matches no later date).
    #[must_use]
    pub fn next_after(&self, after: Millis) -> Option<Millis> {
        match self {
            // Checked: an anchor or a time far out (from an API body) has no tick, not an
            // overflow.
            Self::Interval { every, anchor } => {
                let periods = after
                    .checked_sub(*anchor)?
                    .div_euclid(*every)
                    .checked_add(1)?;
                anchor.checked_add(periods.checked_mul(*every)?)
            }
            Self::Cron(cron, zone) => {
                let start = Utc
                    .timestamp_millis_opt(after)
                    .single()?
                    .with_timezone(zone);
                let next: DateTime<Tz> = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.timestamp_millis())
            }
        }
    }

    /// The ticks in `from..=to`, oldest first, at most `limit` of them.
    #[must_use]
    pub fn between(&self, from: Millis, to: Millis, limit: usize) -> Vec<Millis> {
        let mut ticks = Vec::new();
        let mut at = from.saturating_sub(1);
        while ticks.len() < limit {
            match self.next_after(at) {
                Some(t) if t <= to => {
                    ticks.push(t);
                    at = t;
                }
                _ => break,
            }
        }
        ticks
    }
}

/// A tick time as RFC 3339 in UTC with milliseconds (`2026-03-29T01:00:00.000Z`), as run
/// labels and run ids show it.
#[must_use]
pub fn tick_text(tick: Millis) -> String {
    Utc.timestamp_millis_opt(tick).single().map_or_else(
        || tick.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::*;

    fn cron(expression: &str, zone: &str) -> Ticks {
        ScheduleSpec::Cron {
            expression: expression.into(),
            time_zone: zone.into(),
        }
        .ticks()
        .unwrap()
    }

    /// Unix ms of a wall-clock time in UTC.
    fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> Millis {
        NaiveDate::from_ymd_opt(y, m, d)
            .unwrap()
            .and_hms_opt(h, min, 0)
            .unwrap()
            .and_utc()
            .timestamp_millis()
    }

    #[test]
    fn a_daily_time_in_the_skipped_hour_ticks_once_right_after_the_gap() {
        // Europe/Berlin springs forward on 2027-03-28: 02:00 CET becomes 03:00 CEST
        // (01:00 UTC). 02:30 does not exist that day.
        let ticks = cron("30 2 * * *", "Europe/Berlin");
        let day = ticks.between(utc(2027, 3, 27, 12, 0), utc(2027, 3, 29, 12, 0), 10);
        assert_eq!(
            day,
            vec![utc(2027, 3, 28, 1, 0), utc(2027, 3, 29, 0, 30)],
            "the missing 02:30 ticks once at 03:00 CEST, then 02:30 CEST the next day"
        );
    }

    #[test]
    fn a_daily_time_in_the_repeated_hour_ticks_once_at_its_first_occurrence() {
        // Europe/Berlin falls back on 2027-10-31: 03:00 CEST becomes 02:00 CET (01:00
        // UTC). 02:30 happens at 00:30 UTC and again at 01:30 UTC.
        let ticks = cron("30 2 * * *", "Europe/Berlin");
        let day = ticks.between(utc(2027, 10, 30, 12, 0), utc(2027, 11, 1, 12, 0), 10);
        assert_eq!(
            day,
            vec![utc(2027, 10, 31, 0, 30), utc(2027, 11, 1, 1, 30)],
            "02:30 CEST once, not 02:30 CET too; then 02:30 CET the next day"
        );
    }

    #[test]
    fn new_york_dst_both_ways() {
        // America/New_York: 2027-03-14 02:00 EST -> 03:00 EDT (07:00 UTC);
        // 2027-11-07 02:00 EDT -> 01:00 EST (06:00 UTC).
        let ticks = cron("30 2 * * *", "America/New_York");
        assert_eq!(
            ticks.next_after(utc(2027, 3, 14, 0, 0)),
            Some(utc(2027, 3, 14, 7, 0))
        );
        let fall = ticks.between(utc(2027, 11, 6, 12, 0), utc(2027, 11, 8, 12, 0), 10);
        assert_eq!(fall, vec![utc(2027, 11, 7, 7, 30), utc(2027, 11, 8, 7, 30)]);
        // 01:30 happens twice on the fall-back day: a fixed time ticks once.
        let ticks = cron("30 1 * * *", "America/New_York");
        let fall = ticks.between(utc(2027, 11, 7, 0, 0), utc(2027, 11, 7, 12, 0), 10);
        assert_eq!(fall, vec![utc(2027, 11, 7, 5, 30)]);
    }

    #[test]
    fn an_hourly_wildcard_ticks_at_every_real_hour_across_both_transitions() {
        let ticks = cron("0 * * * *", "Europe/Berlin");
        // Real time moves by one hour per tick on both days: 23 local hours on the
        // spring day, 25 on the fall day.
        let spring = ticks.between(utc(2027, 3, 27, 23, 0), utc(2027, 3, 28, 21, 59), 100);
        assert_eq!(spring.len(), 23);
        let fall = ticks.between(utc(2027, 10, 30, 22, 0), utc(2027, 10, 31, 22, 59), 100);
        assert_eq!(fall.len(), 25);
        assert!(fall.windows(2).all(|w| w[1] - w[0] == 3_600_000));
    }

    #[test]
    fn intervals_count_from_their_anchor() {
        let ticks = ScheduleSpec::Interval {
            every_ms: 60_000,
            anchor_ms: 1_000,
        }
        .ticks()
        .unwrap();
        assert_eq!(ticks.next_after(0), Some(1_000));
        assert_eq!(ticks.next_after(1_000), Some(61_000));
        assert_eq!(ticks.next_after(60_999), Some(61_000));
        assert_eq!(ticks.between(1_000, 181_000, 10).len(), 4);
    }

    #[test]
    fn bad_specs_are_refused_with_what_is_wrong() {
        let bad_cron = ScheduleSpec::Cron {
            expression: "61 * * * *".into(),
            time_zone: "UTC".into(),
        };
        let err = bad_cron.validate(0).unwrap_err();
        assert!(matches!(err, SpecError::MalformedCron { .. }), "{err}");
        assert!(err.to_string().contains("61 * * * *"), "{err}");
        let bad_zone = ScheduleSpec::Cron {
            expression: "0 * * * *".into(),
            time_zone: "Mars/Olympus_Mons".into(),
        };
        assert_eq!(
            bad_zone.validate(0),
            Err(SpecError::UnknownTimeZone("Mars/Olympus_Mons".into()))
        );
        let fast = ScheduleSpec::Interval {
            every_ms: 10,
            anchor_ms: 0,
        };
        assert_eq!(fast.validate(0), Err(SpecError::IntervalTooShort(10)));
    }

    #[test]
    fn tick_text_is_rfc3339_utc_with_millis() {
        assert_eq!(
            tick_text(utc(2027, 3, 28, 1, 0)),
            "2027-03-28T01:00:00.000Z"
        );
    }
}
