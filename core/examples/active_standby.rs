//! An active/standby pair with leader election and fencing tokens.
//!
//! Two nodes campaign for leadership of one election. The leader writes a protected key
//! every 100 ms, each write carrying its fencing token. Then the leader is killed (no
//! resign: its renewal and connection just stop): the standby takes over within the term
//! plus one renewal period, and when the old leader comes back and tries a late write with
//! its old token, the server rejects it.
//!
//! ```sh
//! cargo run -p mqstate --example active_standby                 # starts its own local server
//! MQSTATE_URL=mqtt://127.0.0.1:1883 cargo run -p mqstate --example active_standby
//! ```

use std::time::{Duration, Instant};

use mqstate::lock::LeaderElection;
use mqstate::{Client, ConnectOptions, Error, Hlc, SetOptions};
use mqstate_server::LocalServer;
use tokio::task::JoinHandle;

const ELECTION: &str = "example/active-standby/leader";
const PROTECTED: &str = "example/active-standby/setpoint";
const TERM: Duration = Duration::from_secs(1);

/// A node: its connection, its candidacy, and the task that does the leader's work.
struct Node {
    name: &'static str,
    client: Client,
    election: LeaderElection,
    work: JoinHandle<()>,
}

async fn start_node(
    options: &ConnectOptions,
    name: &'static str,
    t0: Instant,
) -> Result<Node, Error> {
    let client = Client::connect(options.clone().with_client_id(format!("example-{name}"))).await?;
    let election = LeaderElection::new(&client, ELECTION, name)?;
    let (c, e) = (client.clone(), election.clone());
    let work = tokio::spawn(async move {
        let token = match e.campaign(TERM, Duration::from_secs(60)).await {
            Ok(token) => token,
            Err(err) => return println!("[{:>5} ms] {name}: campaign ended: {err}", ms(t0)),
        };
        println!(
            "[{:>5} ms] {name}: elected leader, fencing token {token}",
            ms(t0)
        );
        for n in 1.. {
            // A real leader takes its latest token (renewals make it grow).
            let token = e.lease().current_token().unwrap_or_else(|| token.clone());
            let value = format!("{name} write #{n}");
            match c
                .set(
                    PROTECTED,
                    &value,
                    SetOptions::default().fencing_token(token),
                )
                .await
            {
                Ok(_) => println!("[{:>5} ms] {name}: wrote {value:?}", ms(t0)),
                Err(err) => return println!("[{:>5} ms] {name}: write refused: {err}", ms(t0)),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    Ok(Node {
        name,
        client,
        election,
        work,
    })
}

impl Node {
    /// A crash: no resign, the renewal and the connection just stop. Returns the last token.
    async fn kill(self) -> Option<Hlc> {
        let token = self.election.lease().current_token();
        self.work.abort();
        self.election.lease().stop_renewal();
        self.client.close().await;
        token
    }
}

fn ms(t0: Instant) -> u128 {
    t0.elapsed().as_millis()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Use the state store at MQSTATE_URL, or start a local one on a free port.
    let (options, server) = match std::env::var("MQSTATE_URL") {
        Ok(url) => (ConnectOptions::from_url(&url)?, None),
        Err(_) => {
            let server = LocalServer::start().await?;
            (
                ConnectOptions::new(server.host(), server.port()),
                Some(server),
            )
        }
    };
    let t0 = Instant::now();
    let mut a = Some(start_node(&options, "node-a", t0).await?);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut b = Some(start_node(&options, "node-b", t0).await?);

    tokio::time::sleep(Duration::from_millis(1200)).await;
    let leader_is_a = a.as_ref().is_some_and(|n| n.election.is_leader());
    let (leader, standby) = if leader_is_a {
        (a.take(), b.take())
    } else {
        (b.take(), a.take())
    };
    let (Some(leader), Some(standby)) = (leader, standby) else {
        return Err("no leader after 1.2 s".into());
    };
    let (old_name, killed_at) = (leader.name, Instant::now());
    println!(
        "[{:>5} ms] killing the leader {old_name} (no resign)",
        ms(t0)
    );
    let old_token = leader.kill().await.ok_or("the leader had no token")?;

    // The standby takes over once the killed leader's term runs out.
    while !standby.election.is_leader() {
        if killed_at.elapsed() > Duration::from_secs(10) {
            return Err("the standby did not take over".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "[{:>5} ms] takeover: {} leads {} ms after the kill (term {} ms, renewal every {} ms)",
        ms(t0),
        standby.name,
        killed_at.elapsed().as_millis(),
        TERM.as_millis(),
        TERM.as_millis() / 2
    );
    tokio::time::sleep(Duration::from_millis(350)).await;

    // The old leader wakes up from its "pause" and tries one late write with its old token.
    let late = Client::connect(
        options
            .clone()
            .with_client_id(format!("example-{old_name}-late")),
    )
    .await?;
    let outcome = late
        .set(
            PROTECTED,
            format!("{old_name} late write"),
            SetOptions::default().fencing_token(old_token.clone()),
        )
        .await;
    match outcome {
        Err(err) => println!(
            "[{:>5} ms] {old_name}: late write with old token {old_token} rejected: {err}",
            ms(t0)
        ),
        Ok(_) => return Err("the stale write was accepted".into()),
    }
    let current = late
        .get(PROTECTED)
        .await?
        .ok_or("the protected key is missing")?;
    println!(
        "[{:>5} ms] {PROTECTED} = {:?} (version {})",
        ms(t0),
        String::from_utf8_lossy(&current.value),
        current.version
    );

    late.close().await;
    standby.election.resign().await?;
    standby.kill().await;
    if let Some(server) = server {
        server.shutdown().await;
    }
    Ok(())
}
