//! Text that a peer chose (tokens, device ids, addresses, paths, bodies) on its way into a log
//! line or an error message: cut to a short prefix, so that one request cannot make the log or
//! a reply grow by more than a few hundred bytes, whatever it sends (a refused 64 KiB token
//! once added 320 KiB to the log). Every log line and error that quotes such text goes through
//! [`cut`], and refusals are logged through a [`RefusalLog`], which writes the first few per
//! peer address and counts the rest (docs/security.md, "Logs under attack").

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many characters of a peer's text are kept.
pub(crate) const KEPT_CHARS: usize = 64;

/// `text` as a log line or an error should show it: its first [`KEPT_CHARS`] characters, then
/// its length in bytes when it was longer. `{}` writes the text, `{:?}` quotes and escapes it.
pub(crate) fn cut(text: &str) -> Cut<'_> {
    Cut(text)
}

/// See [`cut`].
#[derive(Clone, Copy)]
pub(crate) struct Cut<'a>(&'a str);

impl Cut<'_> {
    /// The kept prefix, and whether anything was left out.
    fn prefix(&self) -> (&str, bool) {
        match self.0.char_indices().nth(KEPT_CHARS) {
            Some((end, _)) => (self.0.get(..end).unwrap_or_default(), true),
            None => (self.0, false),
        }
    }
}

impl fmt::Display for Cut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kept, cut) = self.prefix();
        f.write_str(kept)?;
        if cut {
            write!(f, "… ({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

impl fmt::Debug for Cut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kept, cut) = self.prefix();
        write!(f, "{kept:?}")?;
        if cut {
            write!(f, "… ({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

/// Refusals logged in full per peer address and [`RefusalLog::WINDOW`].
pub(crate) const LOGGED_PER_WINDOW: u32 = 5;
/// Addresses followed at once; past that the oldest windows are forgotten (an address then
/// starts again with [`LOGGED_PER_WINDOW`] lines: the log grows by a bounded rate, not more).
const ADDRESSES: usize = 4096;

/// Decides which refusals (a bad token, a refused link, a refused CONNECT) reach the log: per
/// peer address, the first [`LOGGED_PER_WINDOW`] of each minute are logged, the others only
/// counted, and the next one logged says how many were left out. One peer repeating a refused
/// request thousands of times a second adds a few lines a minute to the log.
#[derive(Debug, Default)]
pub(crate) struct RefusalLog {
    peers: Mutex<HashMap<IpAddr, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    logged: u32,
    /// Refusals counted but not logged, since the last one logged.
    left_out: u64,
}

impl RefusalLog {
    /// How long a peer's count of logged refusals lasts.
    pub(crate) const WINDOW: Duration = Duration::from_secs(60);

    /// Whether to log a refusal from `peer` now: `Some(n)` with the number of its refusals
    /// left out of the log since the last one logged (to say in the line), or `None` to only
    /// count it.
    pub(crate) fn admit(&self, peer: IpAddr) -> Option<u64> {
        self.admit_at(peer, Instant::now())
    }

    fn admit_at(&self, peer: IpAddr, now: Instant) -> Option<u64> {
        // Only counters live behind this lock: a poisoned one is still consistent.
        let mut peers = self
            .peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if peers.len() >= ADDRESSES && !peers.contains_key(&peer) {
            peers.retain(|_, w| now.duration_since(w.started) < Self::WINDOW);
            if peers.len() >= ADDRESSES {
                peers.clear();
            }
        }
        let window = peers.entry(peer).or_insert(Window {
            started: now,
            logged: 0,
            left_out: 0,
        });
        if now.duration_since(window.started) >= Self::WINDOW {
            window.started = now;
            window.logged = 0;
        }
        if window.logged < LOGGED_PER_WINDOW {
            window.logged += 1;
            Some(std::mem::take(&mut window.left_out))
        } else {
            window.left_out = window.left_out.saturating_add(1);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_summarised_per_peer_and_window() {
        let log = RefusalLog::default();
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let t0 = Instant::now();
        let logged: Vec<_> = (0..50).filter_map(|_| log.admit_at(a, t0)).collect();
        assert_eq!(logged, vec![0; 5]);
        // Another peer has its own count.
        assert_eq!(log.admit_at(b, t0), Some(0));
        // A minute later the next one logged says how many were left out.
        let later = t0 + RefusalLog::WINDOW;
        assert_eq!(log.admit_at(a, later), Some(45));
        assert_eq!(log.admit_at(a, later), Some(0));
    }

    #[test]
    fn many_addresses_do_not_grow_the_map_without_bound() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        for n in 0..(ADDRESSES as u32 + 10) {
            assert!(log.admit_at(IpAddr::from(n.to_be_bytes()), t0).is_some());
        }
        let len = log.peers.lock().map(|p| p.len()).unwrap_or(usize::MAX);
        assert!(len <= ADDRESSES, "{len}");
    }

    #[test]
    fn multi_byte_text_is_cut_on_a_character_boundary() {
        let text = "é".repeat(100);
        let shown = cut(&text).to_string();
        assert!(shown.starts_with(&"é".repeat(64)));
        assert!(shown.ends_with("… (200 bytes)"));
        assert_eq!(cut(&"é".repeat(64)).to_string(), "é".repeat(64));
        // Control characters are escaped by the Debug form, so a peer cannot forge log lines.
        assert_eq!(format!("{:?}", cut("a\nb")), "\"a\\nb\"");
    }

    /// The example that was in this module's documentation.
    #[test]
    fn cut_text() {
        use crate::untrusted::cut;

        assert_eq!(cut("dev1").to_string(), "dev1");
        assert_eq!(format!("{:?}", cut("dev1")), "\"dev1\"");
        let long = "x".repeat(10_000);
        assert_eq!(
            cut(&long).to_string(),
            format!("{}… (10000 bytes)", "x".repeat(64))
        );
        assert!(format!("{:?}", cut(&long)).len() < 100);
    }

    /// The example that was in this module's documentation.
    #[test]
    fn refusals_are_logged_a_few_times() {
        use crate::untrusted::RefusalLog;
        use std::net::{IpAddr, Ipv4Addr};

        let log = RefusalLog::default();
        let peer = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let logged = (0..100).filter(|_| log.admit(peer).is_some()).count();
        assert_eq!(logged, 5);
    }
}
