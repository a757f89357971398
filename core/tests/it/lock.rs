//! Leases, locks and leader election against the local server (embedded broker).

use std::time::{Duration, Instant};

use mqstate::lock::{LeaderElection, LeadershipEvent, Lease, LeaseEvent, Lock};
use mqstate::{Client, ConnectOptions, Error, ServiceError, SetOptions};
use mqstate_server::LocalServer;

/// Bound on anything that must happen; slowness is not a failure, a hang is.
const WAIT: Duration = Duration::from_secs(20);

async fn client(server: &LocalServer, id: &str) -> Client {
    let options = ConnectOptions::new(server.host(), server.port()).with_client_id(id);
    Client::connect(options).await.expect("connect")
}

async fn next_event(events: &mut mqstate::lock::LeaseEvents) -> LeaseEvent {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("a lease event in time")
        .expect("events open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_holders_contend_and_exactly_one_wins() {
    let server = LocalServer::start().await.unwrap();
    let (a, b) = (
        client(&server, "lease-a").await,
        client(&server, "lease-b").await,
    );
    let la = Lease::new(&a, "lease/contend", "A").unwrap();
    let lb = Lease::new(&b, "lease/contend", "B").unwrap();
    let ttl = Duration::from_secs(30);
    let (ra, rb) = tokio::join!(la.acquire(ttl), lb.acquire(ttl));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(
        ra.is_some() ^ rb.is_some(),
        "exactly one wins: {ra:?} {rb:?}"
    );
    let (winner, loser) = if ra.is_some() { (&la, &lb) } else { (&lb, &la) };
    assert_eq!(
        winner.holder().await.unwrap().unwrap(),
        winner.holder_value().clone()
    );
    assert!(loser.current_token().is_none());

    // The loser gets it after the winner releases.
    assert!(winner.release().await.unwrap());
    assert!(loser.acquire(ttl).await.unwrap().is_some());
    // Releasing a lease one does not hold deletes nothing.
    assert!(!winner.release().await.unwrap());
    assert_eq!(
        loser.holder().await.unwrap().unwrap(),
        loser.holder_value().clone()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loser_acquires_after_expiry() {
    let server = LocalServer::start().await.unwrap();
    let (a, b) = (
        client(&server, "exp-a").await,
        client(&server, "exp-b").await,
    );
    let la = Lease::new(&a, "lease/expiry", "A").unwrap();
    let lb = Lease::new(&b, "lease/expiry", "B").unwrap();
    assert!(
        la.acquire(Duration::from_millis(300))
            .await
            .unwrap()
            .is_some()
    );
    assert!(lb.acquire(Duration::from_secs(5)).await.unwrap().is_none());
    // A does not renew: B gets it once A's ttl passed (woken by the expiry's DELETE).
    let token = lb.acquire_wait(Duration::from_secs(5), WAIT).await.unwrap();
    assert_eq!(lb.current_token(), Some(token));
    assert_eq!(lb.holder().await.unwrap().unwrap(), "B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_the_lease_and_tokens_increase() {
    let server = LocalServer::start().await.unwrap();
    let (a, b) = (
        client(&server, "renew-a").await,
        client(&server, "renew-b").await,
    );
    let la = Lease::new(&a, "lease/renew", "A")
        .unwrap()
        .with_session_id("s1");
    assert_eq!(la.holder_value(), "A:s1");
    let ttl = Duration::from_millis(600);
    let first = la.acquire(ttl).await.unwrap().unwrap();

    // A renewal by hand returns a strictly greater token.
    let second = la.renew().await.unwrap().unwrap();
    assert!(second > first, "{second} > {first}");

    // Automatic renewal keeps it over several ttls; every token is greater than the last.
    let mut events = la.events();
    la.auto_renew(0.4).unwrap();
    let mut last = second;
    for _ in 0..6 {
        match next_event(&mut events).await {
            LeaseEvent::Renewed(token) => {
                assert!(token > last, "{token} > {last}");
                last = token;
            }
            other => panic!("expected a renewal, got {other:?}"),
        }
    }
    // 6 renewals at 0.4 × 600 ms: well past several ttls, and still held.
    let lb = Lease::new(&b, "lease/renew", "B").unwrap();
    assert!(lb.acquire(ttl).await.unwrap().is_none());
    assert_eq!(la.current_token(), Some(last));
    assert!(la.release().await.unwrap());
    assert_eq!(next_event(&mut events).await, LeaseEvent::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_token_is_rejected() {
    let server = LocalServer::start().await.unwrap();
    let (a, b) = (
        client(&server, "fence-a").await,
        client(&server, "fence-b").await,
    );
    let ttl = Duration::from_secs(30);
    let la = Lease::new(&a, "lease/fence", "A").unwrap();
    let old = la.acquire(ttl).await.unwrap().unwrap();
    a.set(
        "protected",
        "from A",
        SetOptions::default().fencing_token(old.clone()),
    )
    .await
    .unwrap();
    la.release().await.unwrap();

    let lb = Lease::new(&b, "lease/fence", "B").unwrap();
    let new = lb.acquire(ttl).await.unwrap().unwrap();
    assert!(new > old);
    b.set(
        "protected",
        "from B",
        SetOptions::default().fencing_token(new),
    )
    .await
    .unwrap();

    // A's late write with its old token is refused, and B's value stays.
    let err = a
        .set(
            "protected",
            "late A",
            SetOptions::default().fencing_token(old),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.service_error(),
        Some(&ServiceError::FencingTokenLowerVersion),
        "{err}"
    );
    assert_eq!(a.get("protected").await.unwrap().unwrap().value, "from B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_renewal_reports_loss_when_the_key_is_deleted() {
    let server = LocalServer::start().await.unwrap();
    let (a, b) = (
        client(&server, "lost-a").await,
        client(&server, "lost-b").await,
    );
    let la = Lease::new(&a, "lease/lost", "A").unwrap();
    la.acquire(Duration::from_secs(10)).await.unwrap().unwrap();
    let mut events = la.events();
    la.auto_renew(0.5).unwrap();
    // Give the renewal task time to observe the key before it is deleted.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(b.del("lease/lost", None).await.unwrap(), 1);
    match next_event(&mut events).await {
        LeaseEvent::Lost { reason } => assert!(reason.contains("deleted"), "{reason}"),
        other => panic!("expected a loss, got {other:?}"),
    }
    assert!(la.current_token().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_renewal_reports_loss_when_the_server_stops_answering() {
    let server = LocalServer::start().await.unwrap();
    let a = client(&server, "silent-a").await;
    let la = Lease::new(&a, "lease/silent", "A").unwrap();
    la.acquire(Duration::from_millis(800))
        .await
        .unwrap()
        .unwrap();
    let mut events = la.events();
    la.auto_renew(0.5).unwrap();
    server.shutdown().await;
    match next_event(&mut events).await {
        LeaseEvent::Lost { reason } => assert!(reason.contains("renewal failed"), "{reason}"),
        other => panic!("expected a loss, got {other:?}"),
    }
    assert!(la.current_token().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_wait_wakes_on_delete_not_on_a_timer() {
    let server = LocalServer::start().await.unwrap();
    let (a, b) = (
        client(&server, "wake-a").await,
        client(&server, "wake-b").await,
    );
    let la = Lease::new(&a, "lease/wake", "A").unwrap();
    la.acquire(Duration::from_secs(60)).await.unwrap().unwrap();
    // B's own ttl (its retry safety net) is 60 s too: only the DELETE can wake it in time.
    let lb = Lease::new(&b, "lease/wake", "B").unwrap();
    let waiter = tokio::spawn(async move {
        let token = lb
            .acquire_wait(Duration::from_secs(60), Duration::from_secs(50))
            .await;
        (token, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    assert!(la.release().await.unwrap());
    let (token, acquired_at) = tokio::time::timeout(WAIT, waiter).await.unwrap().unwrap();
    token.unwrap();
    println!(
        "acquire_wait woke {:?} after the release",
        acquired_at.saturating_duration_since(released_at)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_wait_times_out_with_a_timeout_error() {
    let server = LocalServer::start().await.unwrap();
    let (a, b) = (client(&server, "to-a").await, client(&server, "to-b").await);
    Lease::new(&a, "lease/to", "A")
        .unwrap()
        .acquire(Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let err = Lease::new(&b, "lease/to", "B")
        .unwrap()
        .acquire_wait(Duration::from_secs(60), Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
    let err = Lease::new(&b, "lease/to", "B")
        .unwrap()
        .acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), mqstate::ErrorKind::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_guards_and_fenced_edits() {
    let server = LocalServer::start().await.unwrap();
    let (a, b) = (
        client(&server, "lock-a").await,
        client(&server, "lock-b").await,
    );
    let ttl = Duration::from_secs(10);
    let lock_a = Lock::new(&a, "lock/counter", "A").unwrap();
    let lock_b = Lock::new(&b, "lock/counter", "B").unwrap();

    // Concurrent increments under the lock never lose an update. Each concurrent user is a
    // holder of its own: two users with the same holder value share the lease.
    let inc = |old: Option<bytes::Bytes>| {
        let n: u64 = old
            .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
            .unwrap_or(0);
        Some((n + 1).to_string().into())
    };
    let mut tasks = Vec::new();
    let users = [
        lock_a.clone(),
        lock_b.clone(),
        Lock::new(&a, "lock/counter", "A2").unwrap(),
        Lock::new(&b, "lock/counter", "B2").unwrap(),
    ];
    for lock in users {
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                lock.edit("counter", ttl, WAIT, inc).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(a.get("counter").await.unwrap().unwrap().value, "20");

    // A guard carries the token; while it is held the other side waits and times out.
    let guard = lock_a.lock(ttl, WAIT).await.unwrap();
    let err = lock_b
        .lock(ttl, Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)));
    a.set(
        "counter",
        "x",
        SetOptions::default().fencing_token(guard.token().clone()),
    )
    .await
    .unwrap();
    assert!(guard.unlock().await.unwrap());
    // Edit returning None deletes the key (fenced).
    assert_eq!(
        lock_b.edit("counter", ttl, WAIT, |_| None).await.unwrap(),
        None
    );
    assert!(b.get("counter").await.unwrap().is_none());
}

/// One candidate of the election test: its own client, campaigning in the background.
struct Candidate {
    name: String,
    client: Client,
    election: LeaderElection,
    campaign: tokio::task::JoinHandle<()>,
}

async fn candidate(server: &LocalServer, name: &str, generation: u32) -> Candidate {
    let client = client(server, &format!("{name}-{generation}")).await;
    // A restarted candidate is a new holder (as with a session id): the same holder value
    // would take its predecessor's lease over at once.
    let election = LeaderElection::new(&client, "election/test", format!("{name}:{generation}"))
        .unwrap()
        .with_renew_fraction(0.3)
        .unwrap();
    let e = election.clone();
    let campaign = tokio::spawn(async move {
        // Campaign until elected; a candidate that is killed just stops.
        let _ = e
            .campaign(Duration::from_secs(2), Duration::from_secs(300))
            .await;
    });
    Candidate {
        name: name.to_owned(),
        client,
        election,
        campaign,
    }
}

impl Candidate {
    /// A crash: no resign, the renewal stops and the connection goes.
    async fn kill(self) {
        self.campaign.abort();
        self.election.lease().stop_renewal();
        self.client.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_has_one_leader_through_random_kills() {
    let server = LocalServer::start().await.unwrap();
    let observer = client(&server, "election-observer").await;
    let watcher = LeaderElection::new(&observer, "election/test", "observer-only").unwrap();
    let mut changes = watcher.events().await.unwrap();

    let names = ["c1", "c2", "c3"];
    let mut generation = 0;
    let mut live = Vec::new();
    for name in names {
        live.push(candidate(&server, name, generation).await);
    }
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let started = Instant::now();
    let mut kills = 0;
    let mut leaders_seen = std::collections::BTreeSet::new();
    // 30 s of random kills, sampled every 100 ms; bounded by iterations as well as time.
    for step in 0..300_u32 {
        if started.elapsed() > Duration::from_secs(30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let believers: Vec<&str> = live
            .iter()
            .filter(|c| c.election.is_leader())
            .map(|c| c.name.as_str())
            .collect();
        assert!(
            believers.len() <= 1,
            "step {step}: two leaders {believers:?}"
        );
        if let Some(leader) = believers.first() {
            let holder = live.iter().find(|c| c.name == *leader).unwrap();
            assert!(holder.election.lease().current_token().is_some());
            // Recorded by holder value (`name:generation`): a killed leader's restart is
            // another holder, and it may well win the next term under the same name.
            leaders_seen.insert(holder.election.lease().holder_value().clone());
        }
        // Every 3 s kill someone (the leader two times out of three) and restart it.
        if (step + 1).is_multiple_of(30) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let index = match live.iter().position(|c| c.election.is_leader()) {
                Some(leader) if !rng.is_multiple_of(3) => leader,
                _ => (rng % live.len() as u64) as usize,
            };
            let victim = live.swap_remove(index);
            let name = victim.name.clone();
            victim.kill().await;
            kills += 1;
            generation += 1;
            live.push(candidate(&server, &name, generation).await);
        }
    }
    assert!(kills >= 5, "only {kills} kills");
    // After the last kill someone leads again, within a term plus a renewal.
    let deadline = Instant::now() + WAIT;
    while !live.iter().any(|c| c.election.is_leader()) {
        assert!(Instant::now() < deadline, "no leader after the kills");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let leader = live.iter().find(|c| c.election.is_leader()).unwrap();
    assert_eq!(
        &watcher.leader().await.unwrap().unwrap(),
        leader.election.lease().holder_value()
    );
    assert!(
        leaders_seen.len() >= 2,
        "leadership moved: {leaders_seen:?}"
    );
    // The observer saw leadership changes as events.
    let mut new_leaders = 0;
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(10), changes.recv()).await
    {
        if matches!(event, LeadershipEvent::NewLeader(_)) {
            new_leaders += 1;
        }
    }
    assert!(new_leaders >= 2, "{new_leaders} leader changes seen");
    println!("{kills} kills, leaders seen: {leaders_seen:?}, {new_leaders} leader events");
    for c in live {
        c.kill().await;
    }
}

#[test]
fn blocking_lease_and_election() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(LocalServer::start()).unwrap();
    let options = ConnectOptions::new(server.host(), server.port());
    let a = mqstate::blocking::Client::connect(options.clone().with_client_id("bl-a")).unwrap();
    let b = mqstate::blocking::Client::connect(options.with_client_id("bl-b")).unwrap();

    let la = mqstate::lock::blocking::Lease::new(&a, "blocking/lease", "A").unwrap();
    let lb = mqstate::lock::blocking::Lease::new(&b, "blocking/lease", "B").unwrap();
    // Events read from this thread, outside the runtime (the C binding's path).
    let mut events = la.events();
    assert_eq!(
        la.next_event(&mut events, Duration::from_millis(50))
            .unwrap(),
        None
    );
    let token = la.acquire(Duration::from_secs(30)).unwrap().unwrap();
    let acquired = la.next_event(&mut events, WAIT).unwrap().unwrap();
    assert_eq!(
        (acquired.name(), acquired.token()),
        ("acquired", Some(&token))
    );
    assert!(lb.acquire(Duration::from_secs(30)).unwrap().is_none());
    assert_eq!(la.holder().unwrap().unwrap(), "A");
    la.auto_renew(0.5).unwrap();
    assert!(la.release().unwrap());
    let token_b = lb.acquire_wait(Duration::from_secs(30), WAIT).unwrap();
    assert!(token_b > token);

    let lock = mqstate::lock::blocking::Lock::new(&a, "blocking/lock", "A").unwrap();
    let guard = lock.lock(Duration::from_secs(10), WAIT).unwrap();
    assert!(guard.token().is_some());
    assert!(guard.unlock().unwrap());
    assert_eq!(
        lock.edit("blocking/value", Duration::from_secs(10), WAIT, |_| Some(
            "1".into()
        ))
        .unwrap()
        .unwrap(),
        "1"
    );

    let ea = mqstate::lock::blocking::LeaderElection::new(&a, "blocking/election", "A").unwrap();
    let eb = mqstate::lock::blocking::LeaderElection::new(&b, "blocking/election", "B").unwrap();
    assert!(ea.try_campaign(Duration::from_secs(10)).unwrap().is_some());
    assert!(eb.try_campaign(Duration::from_secs(10)).unwrap().is_none());
    assert_eq!(eb.leader().unwrap().unwrap(), "A");
    assert!(ea.resign().unwrap());
    eb.campaign(Duration::from_secs(10), WAIT).unwrap();
    assert!(eb.is_leader());
    a.close();
    b.close();
    runtime.block_on(server.shutdown());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_owns_the_name_fraction_and_session_rules() {
    let server = LocalServer::start().await.unwrap();
    let a = client(&server, "rules-a").await;
    let invalid = |r: Result<(), Error>, words: &str| {
        let e = r.expect_err(words);
        assert_eq!(e.kind(), mqstate::ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains(words), "{e}");
    };
    invalid(Lease::new(&a, "", "h").map(drop), "lease name is empty");
    invalid(Lease::new(&a, "n", "").map(drop), "lease holder is empty");
    invalid(Lock::new(&a, "", "h").map(drop), "lock name is empty");
    invalid(Lock::new(&a, "n", b"").map(drop), "lock holder is empty");
    invalid(
        LeaderElection::new(&a, "", "c").map(drop),
        "election name is empty",
    );
    invalid(
        LeaderElection::new(&a, "e", "").map(drop),
        "election candidate is empty",
    );
    for bad in [0.0, 1.0, -0.5, f64::NAN] {
        let e = LeaderElection::new(&a, "e", "c").unwrap();
        invalid(e.with_renew_fraction(bad).map(drop), "between 0 and 1");
    }
    let lock = Lock::new(&a, "lock/session", "host")
        .unwrap()
        .with_session_id("s-1");
    assert_eq!(lock.lease().holder_value(), "host:s-1");
    let guard = lock.lock(Duration::from_secs(5), WAIT).await.unwrap();
    assert_eq!(
        a.get("lock/session").await.unwrap().unwrap().value,
        "host:s-1"
    );
    assert!(guard.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_async_awaits_f_and_a_failing_f_writes_nothing_and_unlocks() {
    let server = LocalServer::start().await.unwrap();
    let a = client(&server, "edit-async-a").await;
    let lock = Lock::new(&a, "lock/edit-async", "A").unwrap();
    let ttl = Duration::from_secs(10);
    a.set("edited", "1", SetOptions::default()).await.unwrap();

    let new = lock
        .edit_async("edited", ttl, WAIT, |old| async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let mut v = old.unwrap().to_vec();
            v.extend_from_slice(b"+");
            Ok::<_, Error>(Some(v.into()))
        })
        .await
        .unwrap();
    assert_eq!(new.as_deref(), Some(&b"1+"[..]));
    assert_eq!(a.get("edited").await.unwrap().unwrap().value, "1+");

    #[derive(Debug)]
    enum AppError {
        Refused,
        Store(Error),
    }
    impl From<Error> for AppError {
        fn from(e: Error) -> Self {
            AppError::Store(e)
        }
    }
    let err = lock
        .edit_async("edited", ttl, WAIT, |_old| async { Err(AppError::Refused) })
        .await
        .unwrap_err();
    assert!(matches!(err, AppError::Refused), "{err:?}");
    assert_eq!(a.get("edited").await.unwrap().unwrap().value, "1+");
    // The lock was released: the key is gone and another holder takes it at once.
    assert!(a.get("lock/edit-async").await.unwrap().is_none());
    let other = Lock::new(&a, "lock/edit-async", "B").unwrap();
    let guard = other.lock(ttl, Duration::from_secs(1)).await.unwrap();
    assert!(guard.unlock().await.unwrap());
    // The store errors still come through, converted.
    let err = Lock::new(&a, "lock/edit-async", "C")
        .unwrap()
        .edit_async("", ttl, WAIT, |_| async { Ok::<_, AppError>(None) })
        .await
        .unwrap_err();
    assert!(
        matches!(err, AppError::Store(ref e) if e.kind() == mqstate::ErrorKind::InvalidArgument),
        "{err:?}"
    );
}

#[test]
fn event_names_are_stable() {
    let t = mqstate::Hlc::new(1, 0, "StateStore");
    let lease = [
        (LeaseEvent::Acquired(t.clone()), "acquired"),
        (LeaseEvent::Renewed(t.clone()), "renewed"),
        (LeaseEvent::Lost { reason: "x".into() }, "lost"),
        (LeaseEvent::Released, "released"),
    ];
    for (e, name) in lease {
        assert_eq!(e.name(), name);
    }
    let leadership = [
        (LeadershipEvent::Elected(t.clone()), "elected"),
        (LeadershipEvent::Renewed(t.clone()), "renewed"),
        (LeadershipEvent::Lost { reason: "x".into() }, "lost"),
        (LeadershipEvent::Resigned, "resigned"),
        (LeadershipEvent::NewLeader(None), "new_leader"),
    ];
    for (e, name) in leadership {
        assert_eq!(e.name(), name);
    }
    assert_eq!(LeaseEvent::Acquired(t.clone()).token(), Some(&t));
    assert_eq!(LeadershipEvent::Resigned.token(), None);
}
