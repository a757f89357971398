//! Kill and restart the state store (embedded broker and store together, so the broker's
//! sessions are lost) while a client observes a key and another writes it (the observer's
//! connection goes through a proxy held cut for the outage, so the write always lands while
//! it is away): the observer gets
//! the change made while it was away, synthesized from the catch-up GET; requests in flight
//! or sent during the outage complete after the reconnect or fail with a clear error.

use std::time::Duration;

use crate::common::{WAIT, bounded, cut, key, next, proxy, restore, spawn_requests, wait_state};
use mqstate::{
    Client, ConnectOptions, ConnectionState, ErrorKind, NotifyOperation, ReconnectPolicy,
    SetOptions,
};
use mqstate_server::{LocalServer, ServerConfig};

async fn restart_on(port: u16) -> LocalServer {
    // The port was just released; retry briefly if the OS has not let go of it yet.
    let mut last = None;
    for _ in 0..50 {
        match LocalServer::start_with(ServerConfig::default().with_port(port)).await {
            Ok(s) => return s,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not restart on port {port}: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_restart_while_observing() {
    bounded("kill_and_restart_while_observing", async {
        let server = LocalServer::start().await.unwrap();
        let port = server.port();
        // The observer reaches the server through a proxy that is cut for the whole outage,
        // so that the writer's change lands while it is away (that is what the catch-up must
        // find) however long the restart takes.
        let proxy = proxy(port).await;
        let fast = ConnectOptions::new("127.0.0.1", proxy.port()).with_reconnect(
            ReconnectPolicy::new(Duration::from_millis(50), Duration::from_millis(200)),
        );
        let observer = Client::connect(fast).await.unwrap();
        let k = key("restart");
        let deleted = key("restart-deleted");
        observer.set(&k, "v1", SetOptions::default()).await.unwrap();
        let mut obs = observer.observe(&k).await.unwrap();
        observer
            .set(&deleted, "here", SetOptions::default())
            .await
            .unwrap();
        let mut obs_deleted = observer.observe(&deleted).await.unwrap();
        let states = observer.state_changes();

        // Requests in flight when the server dies: answered, or failed with a clear error.
        let in_flight = spawn_requests(&observer, &k, 16);
        cut(&proxy);
        server.shutdown().await;
        wait_state(&observer, ConnectionState::Reconnecting).await;
        for r in in_flight {
            match r.await.unwrap() {
                Ok(()) => {}
                Err(e) => assert!(
                    matches!(e.kind(), ErrorKind::Disconnected | ErrorKind::Timeout),
                    "unclear error: {e}"
                ),
            }
        }
        // Requests sent during the outage wait for the connection.
        let during = {
            let c = observer.clone();
            let k = k.clone();
            tokio::spawn(async move { c.get(&k).await })
        };

        // A new server (empty store, no sessions) on the same port; the writer sets the key
        // before the observer is back.
        let server = restart_on(port).await;
        let writer = Client::connect(ConnectOptions::new("127.0.0.1", port))
            .await
            .unwrap();
        let changed = writer
            .set(&k, "v2-while-away", SetOptions::default())
            .await
            .unwrap();
        restore(&proxy);

        wait_state(&observer, ConnectionState::Connected).await;
        assert!(states.has_changed().unwrap());
        let n = next(&mut obs).await;
        assert_eq!(n.value().unwrap(), "v2-while-away");
        assert_eq!(n.version.as_ref(), Some(&changed.version));
        assert!(n.synthesized, "expected the catch-up notification: {n:?}");
        // The other key is gone in the new store: a synthesized delete.
        let d = next(&mut obs_deleted).await;
        assert_eq!(d.operation, NotifyOperation::Delete);
        assert!(d.synthesized);

        // The request sent during the outage completed once reconnected.
        let got = tokio::time::timeout(WAIT, during).await.unwrap().unwrap();
        assert_eq!(got.unwrap().unwrap().value, "v2-while-away");

        // The registration is back: a live change arrives as a normal notification.
        let live = writer.set(&k, "v3", SetOptions::default()).await.unwrap();
        let n = next(&mut obs).await;
        assert_eq!(n.version.as_ref(), Some(&live.version));
        assert!(!n.synthesized);
        assert_eq!(observer.requests_in_flight(), 0);

        observer.close().await;
        writer.close().await;
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_an_outage_that_outlasts_their_timeout_fail_clearly() {
    bounded("outage_outlasts_timeout", async {
        let server = LocalServer::start().await.unwrap();
        let client = Client::connect(ConnectOptions::new("127.0.0.1", server.port()))
            .await
            .unwrap();
        server.shutdown().await;
        wait_state(&client, ConnectionState::Reconnecting).await;
        let err = client
            .with_timeout(Duration::from_millis(200))
            .get("k")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Disconnected);
        assert!(err.to_string().contains("not sent"), "{err}");
        client.close().await;
        assert_eq!(client.state(), ConnectionState::Closed);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_connection_failure_is_reported() {
    bounded("first_connection_failure", async {
        let port = mqstate_testing::free_port().unwrap();
        let err = Client::connect(ConnectOptions::new("127.0.0.1", port))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    })
    .await;
}
