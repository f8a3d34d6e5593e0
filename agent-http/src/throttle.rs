//! Failed token attempts, throttled: a client (by address) that presented a wrong token
//! [`PER_CLIENT`] times within [`WINDOW`] is refused (`429` with `Retry-After`) until the
//! window ends, whatever it presents, so that guessing costs a window per few guesses. And
//! when every client together failed [`GLOBAL`] times within the window, every client
//! that failed at all in it is refused too, so that guesses spread over many addresses
//! are bounded as well; a client that has not failed is never refused.
//!
//! Only wrong tokens count (a missing one guesses nothing). Behind a proxy, every client
//! has the proxy's address and shares its allowance; a router mounted without
//! `into_make_service_with_connect_info` has no addresses, and only the global count
//! applies.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens one client may present within a window.
pub(crate) const PER_CLIENT: u32 = 10;
/// Wrong tokens every client together may present within a window.
pub(crate) const GLOBAL: u32 = 100;
/// The window.
pub(crate) const WINDOW: Duration = Duration::from_mins(1);
/// The most clients remembered at once: past it, windows that ended are forgotten, and if
/// none has, a new client counts only towards the global count.
const MAX_CLIENTS: usize = 10_000;

/// Failures counted since `started`.
#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

impl Window {
    fn new(now: Instant) -> Self {
        Self {
            started: now,
            failures: 0,
        }
    }

    /// Restart it if it ended by `now`.
    fn current(&mut self, now: Instant, length: Duration) -> &mut Self {
        if now.duration_since(self.started) >= length {
            *self = Self::new(now);
        }
        self
    }

    /// Whole seconds until it ends, at least one.
    fn retry_after(&self, now: Instant, length: Duration) -> u32 {
        let left = length.saturating_sub(now.duration_since(self.started));
        u32::try_from(left.as_secs() + u64::from(left.subsec_nanos() > 0))
            .unwrap_or(u32::MAX)
            .max(1)
    }
}

#[derive(Debug)]
struct Counts {
    global: Window,
    clients: HashMap<Option<IpAddr>, Window>,
}

/// The counts of failed attempts, shared by every check of a token.
#[derive(Debug)]
pub(crate) struct Throttle {
    per_client: u32,
    global: u32,
    window: Duration,
    counts: Mutex<Counts>,
}

impl Throttle {
    pub(crate) fn new(per_client: u32, global: u32, window: Duration) -> Self {
        Self {
            per_client,
            global,
            window,
            counts: Mutex::new(Counts {
                global: Window::new(Instant::now()),
                clients: HashMap::new(),
            }),
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `Some(seconds)` when `client` may not try a token now: it failed too often, or
    /// everyone did and it failed too.
    pub(crate) fn refused(&self, client: Option<IpAddr>) -> Option<u32> {
        let now = Instant::now();
        let mut counts = self.counts();
        let (window, global) = (self.window, self.global);
        let everyone = *counts.global.current(now, window);
        let own = (counts.clients.get_mut(&client)).map(|w| *w.current(now, window));
        match own {
            Some(own) if own.failures >= self.per_client => Some(own.retry_after(now, window)),
            Some(own) if own.failures > 0 && everyone.failures >= global => {
                Some(everyone.retry_after(now, window))
            }
            _ => None,
        }
    }

    /// Count a wrong token presented by `client`.
    pub(crate) fn failed(&self, client: Option<IpAddr>) {
        let now = Instant::now();
        let window = self.window;
        let mut counts = self.counts();
        let global = counts.global.current(now, window);
        global.failures = global.failures.saturating_add(1);
        if counts.clients.len() >= MAX_CLIENTS && !counts.clients.contains_key(&client) {
            counts
                .clients
                .retain(|_, w| now.duration_since(w.started) < window);
            if counts.clients.len() >= MAX_CLIENTS {
                return;
            }
        }
        let own = (counts.clients)
            .entry(client)
            .or_insert_with(|| Window::new(now))
            .current(now, window);
        own.failures = own.failures.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Duration;

    use super::Throttle;

    fn ip(n: u8) -> Option<IpAddr> {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)).into()
    }

    #[test]
    fn a_client_is_refused_after_its_failures_and_others_are_not() {
        let t = Throttle::new(3, 100, Duration::from_mins(1));
        for _ in 0..3 {
            assert_eq!(t.refused(ip(1)), None);
            t.failed(ip(1));
        }
        let secs = t.refused(ip(1)).expect("refused after 3 failures");
        assert!((1..=60).contains(&secs), "{secs}");
        assert_eq!(t.refused(ip(2)), None);
        assert_eq!(t.refused(None), None);
    }

    #[test]
    fn past_the_global_count_clients_that_failed_are_refused() {
        let t = Throttle::new(100, 5, Duration::from_mins(1));
        for n in 0..5 {
            t.failed(ip(n));
        }
        assert!(t.refused(ip(0)).is_some());
        assert!(t.refused(ip(4)).is_some());
        assert_eq!(t.refused(ip(9)), None, "a client that never failed");
    }

    #[test]
    fn the_window_ends() {
        let t = Throttle::new(1, 100, Duration::from_millis(1));
        t.failed(ip(1));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(t.refused(ip(1)), None);
    }
}
