//! The blocking client from 8 threads at once, its observation iterator with a timeout, and
//! its use from inside an async runtime's thread (no panic).

use std::time::Duration;

use mqstate::blocking::Client;
use mqstate::{
    ConnectOptions, ConnectionState, ErrorKind, NotifyOperation, SetOptions, VdelOutcome,
};
use mqstate_server::{LocalServer, ServerConfig};

fn server() -> (tokio::runtime::Runtime, LocalServer) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = LocalServer::start_blocking(rt.handle(), ServerConfig::default()).unwrap();
    (rt, server)
}

#[test]
fn blocking_client_from_8_threads() {
    let (rt, server) = server();
    let client = Client::connect(ConnectOptions::new("127.0.0.1", server.port())).unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let client = client.clone();
            s.spawn(move || {
                for i in 0..50 {
                    let k = format!("blocking-{t}-{i}");
                    let v = format!("value-{t}-{i}\r\n");
                    assert!(client.set(&k, &v, SetOptions::default()).unwrap().applied);
                    assert_eq!(client.get(&k).unwrap().unwrap().value, v.as_bytes());
                    assert_eq!(client.vdel(&k, &v, None).unwrap(), VdelOutcome::Deleted);
                    assert!(client.get(&k).unwrap().is_none());
                }
            });
        }
    });
    assert_eq!(client.as_async().requests_in_flight(), 0);
    client.close();
    assert_eq!(client.state(), ConnectionState::Closed);
    assert_eq!(client.get("k").unwrap_err().kind(), ErrorKind::Disconnected);
    server.shutdown_blocking(rt.handle());
}

#[test]
fn blocking_observation_iterator_with_timeout() {
    let (rt, server) = server();
    let opts = ConnectOptions::new("127.0.0.1", server.port());
    let observer = Client::connect(opts.clone()).unwrap();
    let writer = Client::connect(opts).unwrap();
    let changes = observer.observe("blocking-observed").unwrap();
    let err = changes
        .recv_timeout(Duration::from_millis(50))
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);

    // Read from another thread while this one writes.
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for change in changes {
            let change = change.unwrap();
            let done = change.operation == NotifyOperation::Delete;
            seen.push(change);
            if done {
                break;
            }
        }
        seen
    });
    for i in 0..5 {
        writer
            .set("blocking-observed", format!("{i}"), SetOptions::default())
            .unwrap();
    }
    writer.del("blocking-observed", None).unwrap();
    let seen = reader.join().unwrap();
    assert_eq!(seen.len(), 6);
    assert_eq!(seen[4].value().unwrap(), "4");

    // unobserve ends a blocking stream.
    let again = observer.observe("blocking-observed").unwrap();
    observer.unobserve("blocking-observed").unwrap();
    assert!(again.recv_timeout(Duration::from_secs(10)).is_none());

    observer.close();
    // The stream of a closed client ends.
    drop(writer);
    server.shutdown_blocking(rt.handle());
}

#[test]
fn slow_reader_gets_a_lag_report_not_unbounded_memory() {
    let (rt, server) = server();
    let mut opts = ConnectOptions::new("127.0.0.1", server.port());
    opts.observation_buffer = 4;
    let observer = Client::connect(opts.clone()).unwrap();
    let writer = Client::connect(ConnectOptions::new("127.0.0.1", server.port())).unwrap();
    let changes = observer.observe("lagging").unwrap();
    let mut last = None;
    for i in 0..20 {
        last = Some(
            writer
                .set("lagging", format!("{i}"), SetOptions::default())
                .unwrap(),
        );
    }
    // A marker write the reader can wait for (notifications are delivered in order).
    let mut values = Vec::new();
    let mut lagged = 0;
    // Give the notifications time to arrive (not a speed assertion: the loop below only
    // needs the buffer to have overflowed at some point, which 20 writes into 4 slots do).
    std::thread::sleep(Duration::from_millis(500));
    while let Some(item) = changes.recv_timeout(Duration::from_millis(500)) {
        match item {
            Ok(n) => values.push(n.value().unwrap().clone()),
            Err(e) if e.kind() == ErrorKind::Lagged => {
                if let mqstate::Error::Lagged(n) = e {
                    lagged += n;
                }
            }
            Err(e) if e.kind() == ErrorKind::Timeout => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(lagged > 0, "expected a lag report, got values {values:?}");
    assert_eq!(values.len() as u64 + lagged, 20);
    assert!(
        values.len() <= 5,
        "at most the buffer (4) plus one after the lag marker"
    );
    let _ = last;
    observer.close();
    writer.close();
    server.shutdown_blocking(rt.handle());
}

#[test]
fn blocking_calls_from_inside_a_runtime_do_not_panic() {
    let (rt, server) = server();
    let port = server.port();
    let result = rt.block_on(async move {
        // A blocking call on an async worker thread: bad practice, but it must not panic.
        let client = Client::connect(ConnectOptions::new("127.0.0.1", port)).unwrap();
        client
            .set("inside", "runtime", SetOptions::default())
            .unwrap();
        let v = client.get("inside").unwrap().unwrap().value;
        drop(client); // dropping the last handle inside a runtime must not panic either
        v
    });
    assert_eq!(result, "runtime");
    server.shutdown_blocking(rt.handle());
}
