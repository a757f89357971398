//! [`LeaderElection`]: candidates of one election; the leader holds the election's lease and
//! renews it automatically; [`LeadershipEvent`]s tell who leads.

use std::time::Duration;

use bytes::Bytes;

use super::{
    DEFAULT_RENEW_FRACTION, FencingToken, Lease, LeaseEvent, LeaseEvents, check_renew_fraction,
};
use crate::client::observe::KeyObservation;
use crate::protocol::resp3::NotifyOperation;
use crate::{Client, Error};

/// What a candidate learns about an election.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeadershipEvent {
    /// This candidate became the leader; the token fences its writes.
    Elected(FencingToken),
    /// This candidate's term was renewed.
    Renewed(FencingToken),
    /// This candidate is no longer the leader (renewal failed or was refused).
    Lost {
        /// Why.
        reason: String,
    },
    /// This candidate resigned.
    Resigned,
    /// Another candidate leads now (`Some(name)`), or nobody does (`None`).
    NewLeader(Option<Bytes>),
}

impl LeadershipEvent {
    /// The stable snake_case name of the event (`"elected"`, `"renewed"`, `"lost"`,
    /// `"resigned"`, `"new_leader"`), which every binding exposes (Node in camelCase:
    /// `newLeader`); never renamed.
    ///
    /// ```
    /// use mqstate::lock::LeadershipEvent;
    /// assert_eq!(LeadershipEvent::NewLeader(None).name(), "new_leader");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            LeadershipEvent::Elected(_) => "elected",
            LeadershipEvent::Renewed(_) => "renewed",
            LeadershipEvent::Lost { .. } => "lost",
            LeadershipEvent::Resigned => "resigned",
            LeadershipEvent::NewLeader(_) => "new_leader",
        }
    }

    /// The fencing token the event carries (`elected`, `renewed`).
    pub fn token(&self) -> Option<&FencingToken> {
        match self {
            LeadershipEvent::Elected(t) | LeadershipEvent::Renewed(t) => Some(t),
            _ => None,
        }
    }
}

/// Leader election among candidates of one election: the leader holds the election's
/// lease and renews it automatically; the others wait on it.
///
/// ```no_run
/// use std::time::Duration;
/// use mqstate::lock::{LeaderElection, LeadershipEvent};
///
/// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
/// let election = LeaderElection::new(&client, "election/pumps", "node-b")?;
/// let mut events = election.events().await?;
/// let token = election.campaign(Duration::from_secs(5), Duration::from_secs(600)).await?;
/// println!("leading with token {token}");
/// while let Some(event) = events.recv().await {
///     if let LeadershipEvent::Lost { .. } = event {
///         break; // stop acting as the leader
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LeaderElection {
    lease: Lease,
    renew_fraction: f64,
}

impl LeaderElection {
    /// Candidate `candidate` in the election `election` (the key the leader holds). An empty
    /// election name or candidate is an [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn demo(client: &mqstate::Client) -> Result<(), mqstate::Error> {
    /// let election = mqstate::lock::LeaderElection::new(client, "election/pumps", "node-b")?;
    /// assert!(!election.is_leader());
    /// # Ok(()) }
    /// ```
    pub fn new(
        client: &Client,
        election: impl AsRef<[u8]>,
        candidate: impl AsRef<[u8]>,
    ) -> Result<LeaderElection, Error> {
        Ok(LeaderElection {
            lease: Lease::named(
                client,
                election.as_ref(),
                candidate.as_ref(),
                "election",
                "candidate",
            )?,
            renew_fraction: DEFAULT_RENEW_FRACTION,
        })
    }

    /// Renew the term every `fraction` × term instead of half of it; `fraction` must be
    /// strictly between 0 and 1 ([`Error::InvalidArgument`] otherwise).
    ///
    /// ```no_run
    /// # fn demo(client: &mqstate::Client) -> Result<(), mqstate::Error> {
    /// use mqstate::lock::LeaderElection;
    /// let e = LeaderElection::new(client, "election/pumps", "node-b")?.with_renew_fraction(0.3)?;
    /// assert!(LeaderElection::new(client, "e", "c")?.with_renew_fraction(1.0).is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_renew_fraction(mut self, fraction: f64) -> Result<LeaderElection, Error> {
        self.renew_fraction = check_renew_fraction(fraction)?;
        Ok(self)
    }

    /// The lease underneath.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Campaigns until elected or `timeout` passes ([`Error::Timeout`]); once elected, the
    /// term is renewed automatically until [`resign`](LeaderElection::resign) or a loss.
    pub async fn campaign(&self, term: Duration, timeout: Duration) -> Result<FencingToken, Error> {
        let token = self.lease.acquire_wait(term, timeout).await?;
        self.lease.auto_renew(self.renew_fraction)?;
        Ok(token)
    }

    /// Tries once: `Some(token)` if elected (renewal then runs automatically).
    pub async fn try_campaign(&self, term: Duration) -> Result<Option<FencingToken>, Error> {
        let token = self.lease.acquire(term).await?;
        if token.is_some() {
            self.lease.auto_renew(self.renew_fraction)?;
        }
        Ok(token)
    }

    /// Steps down (if leading): stops renewing and releases the election key.
    pub async fn resign(&self) -> Result<bool, Error> {
        self.lease.release().await
    }

    /// The current leader, `None` if there is none.
    pub async fn leader(&self) -> Result<Option<Bytes>, Error> {
        self.lease.holder().await
    }

    /// True while this candidate believes it leads (it holds a token that has not been lost).
    pub fn is_leader(&self) -> bool {
        self.lease.current_token().is_some()
    }

    /// The leadership changes from now on: this candidate's own (elected, renewed, lost,
    /// resigned) and the election key's (another leader, or none).
    pub async fn events(&self) -> Result<LeadershipEvents, Error> {
        Ok(LeadershipEvents {
            own: self.lease.events(),
            key: self.lease.observe().await?,
            candidate: self.lease.holder.clone(),
        })
    }
}

/// A stream of [`LeadershipEvent`]s ([`LeaderElection::events`]).
#[derive(Debug)]
pub struct LeadershipEvents {
    own: LeaseEvents,
    key: KeyObservation,
    candidate: Bytes,
}

impl LeadershipEvents {
    /// The next event; `None` when the client is closed.
    pub async fn recv(&mut self) -> Option<LeadershipEvent> {
        loop {
            tokio::select! {
                event = self.own.recv() => {
                    return Some(match event? {
                        LeaseEvent::Acquired(t) => LeadershipEvent::Elected(t),
                        LeaseEvent::Renewed(t) => LeadershipEvent::Renewed(t),
                        LeaseEvent::Lost { reason } => LeadershipEvent::Lost { reason },
                        LeaseEvent::Released => LeadershipEvent::Resigned,
                    });
                }
                change = self.key.recv() => match change? {
                    // Our own SETs are reported through the lease events.
                    Ok(n) => match n.operation {
                        NotifyOperation::Set(holder) if holder == self.candidate => continue,
                        NotifyOperation::Set(holder) => return Some(LeadershipEvent::NewLeader(Some(holder))),
                        NotifyOperation::Delete => return Some(LeadershipEvent::NewLeader(None)),
                    },
                    // A lag report: the next notification tells the current state.
                    Err(_) => continue,
                },
            }
        }
    }
}
