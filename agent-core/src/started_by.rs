//! What started a run, as the labels its starter gave it: a schedule's tick
//! ([`crate::schedule`]), a message trigger's message (the crate `agent-triggers`) or a
//! webhook's delivery (the HTTP crate's webhooks). Each starter writes these labels and
//! every reader (the inspector, `agentctl show`, `agentctl triggers`) reads them through
//! [`StartedBy::of`], so that the names are written in one place.

use std::fmt;

use crate::store::Labels;

/// The label naming the schedule that started a run.
pub const SCHEDULE_LABEL: &str = "schedule";
/// The label giving the tick (RFC 3339, UTC) whose run it is.
pub const TICK_LABEL: &str = "schedule.tick";
/// The label every run a message trigger starts carries: the trigger's name.
pub const TRIGGER_LABEL: &str = "trigger";
/// The label holding the message's dedup key (or, when the key is no valid label value,
/// `sha256:` and its hash).
pub const TRIGGER_MESSAGE_LABEL: &str = "trigger.message";
/// The label holding the subject or topic the message came from.
pub const TRIGGER_ORIGIN_LABEL: &str = "trigger.origin";
/// The label naming the webhook that started a run.
pub const WEBHOOK_LABEL: &str = "webhook";
/// The label holding the webhook delivery's key.
pub const WEBHOOK_DELIVERY_LABEL: &str = "webhook.delivery";

/// What started a run, read from its labels. A run started by code or the API has none of
/// these labels ([`StartedBy::of`] is `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartedBy<'a> {
    /// A schedule's tick.
    Schedule {
        /// The schedule's id.
        schedule: &'a str,
        /// The tick, as [`TICK_LABEL`] holds it (`None` when the label is missing).
        tick: Option<&'a str>,
    },
    /// A message trigger's message.
    Trigger {
        /// The trigger's name.
        trigger: &'a str,
        /// The message's dedup key, as [`TRIGGER_MESSAGE_LABEL`] holds it.
        message: Option<&'a str>,
        /// The subject or topic it came from.
        origin: Option<&'a str>,
    },
    /// A webhook's delivery.
    Webhook {
        /// The webhook's name.
        webhook: &'a str,
        /// The delivery's key.
        delivery: Option<&'a str>,
    },
}

impl<'a> StartedBy<'a> {
    /// What the labels say started the run, or `None` for a run started by code or the
    /// API.
    #[must_use]
    pub fn of(labels: &'a Labels) -> Option<Self> {
        let label = |key: &str| labels.get(key).map(String::as_str);
        if let Some(schedule) = label(SCHEDULE_LABEL) {
            return Some(Self::Schedule {
                schedule,
                tick: label(TICK_LABEL),
            });
        }
        if let Some(webhook) = label(WEBHOOK_LABEL) {
            return Some(Self::Webhook {
                webhook,
                delivery: label(WEBHOOK_DELIVERY_LABEL),
            });
        }
        label(TRIGGER_LABEL).map(|trigger| Self::Trigger {
            trigger,
            message: label(TRIGGER_MESSAGE_LABEL),
            origin: label(TRIGGER_ORIGIN_LABEL),
        })
    }
}

impl fmt::Display for StartedBy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Schedule { schedule, tick } => {
                write!(
                    f,
                    "schedule `{schedule}`, its tick of {}",
                    tick.unwrap_or("?")
                )
            }
            Self::Webhook { webhook, delivery } => write!(
                f,
                "webhook `{webhook}`, delivery `{}`",
                delivery.unwrap_or("?")
            ),
            Self::Trigger {
                trigger,
                message,
                origin,
            } => {
                write!(
                    f,
                    "trigger `{trigger}`, message `{}`",
                    message.unwrap_or("?")
                )?;
                match origin {
                    Some(origin) => write!(f, " on `{origin}`"),
                    None => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Labels, StartedBy};

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn text(pairs: &[(&str, &str)]) -> Option<String> {
        StartedBy::of(&labels(pairs)).map(|s| s.to_string())
    }

    #[test]
    fn each_starter_reads_from_its_labels() {
        assert_eq!(
            text(&[
                ("schedule", "digest"),
                ("schedule.tick", "2026-01-05T08:00:00Z")
            ])
            .as_deref(),
            Some("schedule `digest`, its tick of 2026-01-05T08:00:00Z")
        );
        assert_eq!(
            text(&[("webhook", "orders"), ("webhook.delivery", "d-1")]).as_deref(),
            Some("webhook `orders`, delivery `d-1`")
        );
        assert_eq!(
            text(&[
                ("trigger", "inbox"),
                ("trigger.message", "ORDERS:7"),
                ("trigger.origin", "orders.new")
            ])
            .as_deref(),
            Some("trigger `inbox`, message `ORDERS:7` on `orders.new`")
        );
        assert_eq!(
            text(&[("trigger", "inbox")]).as_deref(),
            Some("trigger `inbox`, message `?`")
        );
        assert_eq!(text(&[("tenant", "acme")]), None);
    }
}
