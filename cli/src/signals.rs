//! Ctrl-C (SIGINT) and SIGTERM as events, for the commands that run until stopped
//! (`watch`, `bench`) or supervise a child (`lock`, `elect`).

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::exit::Failure;

/// Which signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

/// SIGINT and SIGTERM, caught from creation on (they no longer end the process).
#[derive(Debug)]
pub struct Interrupts {
    interrupt: Signal,
    terminate: Signal,
}

impl Interrupts {
    /// Starts catching both signals.
    pub fn new() -> Result<Interrupts, Failure> {
        let catch = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| Failure::usage(format!("cannot catch {name}: {e}")))
        };
        Ok(Interrupts {
            interrupt: catch(SignalKind::interrupt(), "SIGINT")?,
            terminate: catch(SignalKind::terminate(), "SIGTERM")?,
        })
    }

    /// Waits for either signal.
    pub async fn recv(&mut self) {
        self.next().await;
    }

    /// Waits for either signal and says which.
    pub async fn next(&mut self) -> Stop {
        tokio::select! {
            _ = self.interrupt.recv() => Stop::Interrupt,
            _ = self.terminate.recv() => Stop::Terminate,
        }
    }
}
