//! Runs the behaviour scenarios shared by every language (`tests/scenarios/*.json`, format in
//! `tests/scenarios/README.md`) against a real local state store. The C, Python and Node
//! suites run the same files; a step type or field this runner does not know fails it.

use std::collections::HashMap;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream as _;
use mqstate::lock::{LeaderElection, Lease, LeaseEvents, Lock, LockGuard};
use mqstate::{
    Client, ConnectSettings, Error, ErrorKind, Hlc, KeyObservation, NotifyOperation, Scan,
    SetCondition, SetOptions, VdelOutcome,
};
use mqstate_testing::{Backend, TestStore};
use serde_json::{Map, Value, json};

/// How long anything that must happen may take (generous: the machine may be busy).
const WAIT: Duration = Duration::from_secs(20);

/// The fields each step type takes (besides `op`, `client` and `expect`).
const STEPS: &[(&str, &[&str])] = &[
    ("connect", &["url", "host", "tls", "connect_timeout_ms"]),
    ("close", &[]),
    (
        "set",
        &[
            "key",
            "value",
            "nx",
            "nex",
            "expiry_ms",
            "fencing_token",
            "save_version",
        ],
    ),
    ("get", &["key"]),
    ("del", &["key", "fencing_token"]),
    ("vdel", &["key", "value", "fencing_token"]),
    ("observe", &["key", "observer"]),
    ("expect_notification", &["observer", "operation", "value"]),
    ("flood", &["key", "count"]),
    ("expect_lagged", &["observer", "total"]),
    ("hlc", &["ms", "counter", "node_id"]),
    (
        "lease_acquire",
        &["lease", "name", "holder", "ttl_ms", "save_token"],
    ),
    ("lease_auto_renew", &["lease", "fraction"]),
    ("expect_lease_event", &["lease", "event", "skip"]),
    ("lease_release", &["lease"]),
    (
        "lock",
        &["lock", "name", "holder", "session", "ttl_ms", "timeout_ms"],
    ),
    (
        "lock_edit",
        &[
            "lock",
            "name",
            "holder",
            "key",
            "ttl_ms",
            "timeout_ms",
            "new_value",
        ],
    ),
    ("unlock", &["lock"]),
    (
        "try_campaign",
        &["election", "name", "candidate", "term_ms"],
    ),
    ("leader", &["election"]),
    ("resign", &["election"]),
    ("fill", &["prefix", "count", "start", "delete"]),
    ("scan", &["pattern"]),
    ("scan_open", &["scan", "pattern"]),
    ("scan_page", &["scan"]),
    ("scan_rest", &["scan", "must_include"]),
];

/// Fields whose values are byte strings (compared as bytes, whatever their JSON spelling).
const BYTE_FIELDS: &[&str] = &["value", "leader", "old"];

/// A JSON value of a scenario as bytes: a string is its UTF-8, `{"hex": ...}` is binary.
fn bytes_of(v: &Value) -> Vec<u8> {
    match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Object(o) if o.len() == 1 && o.contains_key("hex") => {
            let hex = o["hex"].as_str().expect("hex must be a string");
            assert!(hex.len() % 2 == 0, "odd hex length: {hex}");
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digits"))
                .collect()
        }
        other => panic!("not a value (a string or {{\"hex\": ...}}): {other}"),
    }
}

/// Bytes in the form the scenarios compare: a string if UTF-8, else `{"hex": ...}`.
fn canonical(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => json!(s),
        Err(_) => json!({"hex": bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()}),
    }
}

fn canonical_opt(bytes: Option<&[u8]>) -> Value {
    bytes.map_or(Value::Null, canonical)
}

/// The state of one scenario run: its clients and the objects its steps named.
struct Run {
    server_url: String,
    blackhole_port: u16,
    uid: String,
    prefix: String,
    clients: HashMap<String, Client>,
    observers: HashMap<String, KeyObservation>,
    tokens: HashMap<String, Hlc>,
    leases: HashMap<String, Lease>,
    lease_events: HashMap<String, LeaseEvents>,
    locks: HashMap<String, (Lock, Option<LockGuard>)>,
    elections: HashMap<String, LeaderElection>,
    /// Open scans and the keys their pages listed so far.
    scans: HashMap<String, (Scan, Vec<Bytes>)>,
}

type Outcome = Result<Map<String, Value>, Error>;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

impl Run {
    fn subst(&self, s: &str) -> String {
        s.replace("{server}", &self.server_url)
            .replace(
                "{blackhole}",
                &format!("mqtt://127.0.0.1:{}", self.blackhole_port),
            )
            .replace("{blackhole_port}", &self.blackhole_port.to_string())
            .replace("{uid}", &self.uid)
    }

    /// A key or name of the scenario, with the run's prefix (the empty one stays empty).
    fn key(&self, step: &Value, field: &str) -> Bytes {
        let raw = bytes_of(&step[field]);
        if raw.is_empty() {
            return Bytes::new();
        }
        let mut k = self.prefix.as_bytes().to_vec();
        k.extend_from_slice(&raw);
        Bytes::from(k)
    }

    /// Listed keys as the scan steps give them: without the run's prefix, sorted by bytes.
    fn listed(&self, keys: &[Bytes]) -> Value {
        let mut keys: Vec<&[u8]> = keys
            .iter()
            .map(|k| {
                k.strip_prefix(self.prefix.as_bytes())
                    .unwrap_or_else(|| panic!("{k:?} lacks the run's prefix"))
            })
            .collect();
        keys.sort();
        Value::Array(keys.into_iter().map(canonical).collect())
    }

    fn client(&self, step: &Value) -> &Client {
        let name = step["client"].as_str().unwrap_or("a");
        self.clients
            .get(name)
            .unwrap_or_else(|| panic!("no client {name:?} is open"))
    }

    fn token(&self, step: &Value) -> Option<Hlc> {
        step.get("fencing_token").map(|t| {
            let name = t.as_str().expect("fencing_token names a saved token");
            self.tokens
                .get(name)
                .unwrap_or_else(|| panic!("no token saved as {name:?}"))
                .clone()
        })
    }

    async fn execute(&mut self, op: &str, step: &Value) -> Outcome {
        let u64_of = |f: &str| {
            step[f]
                .as_u64()
                .unwrap_or_else(|| panic!("{f} must be a whole number"))
        };
        let str_of = |f: &str| {
            step[f]
                .as_str()
                .unwrap_or_else(|| panic!("{f} must be a string"))
                .to_owned()
        };
        let mut out = Map::new();
        match op {
            "connect" => {
                // The fields go through the core's merge, as every binding's do.
                let mut settings = ConnectSettings::default();
                settings.url = step.get("url").map(|_| self.subst(&str_of("url")));
                settings.host = step.get("host").map(|_| self.subst(&str_of("host")));
                settings.tls = step
                    .get("tls")
                    .map(|t| t.as_bool().expect("tls must be a bool"));
                settings.connect_timeout = step
                    .get("connect_timeout_ms")
                    .map(|t| ms(t.as_u64().unwrap()));
                let client = Client::connect(settings.resolve()?).await?;
                let name = step["client"].as_str().unwrap_or("a").to_owned();
                self.clients.insert(name, client);
            }
            "close" => {
                let name = step["client"].as_str().unwrap_or("a");
                let client = self
                    .clients
                    .remove(name)
                    .unwrap_or_else(|| panic!("no client {name:?} is open"));
                client.close().await;
            }
            "set" => {
                let mut options = SetOptions::default();
                options.condition = SetCondition::from_flags(
                    step["nx"] == json!(true),
                    step["nex"] == json!(true),
                )?;
                if let Some(e) = step.get("expiry_ms") {
                    options = options.expiry(ms(e.as_u64().unwrap()));
                }
                if let Some(t) = self.token(step) {
                    options = options.fencing_token(t);
                }
                let key = self.key(step, "key");
                let outcome = self
                    .client(step)
                    .set(key, Bytes::from(bytes_of(&step["value"])), options)
                    .await?;
                if let Some(name) = step.get("save_version") {
                    self.tokens
                        .insert(name.as_str().unwrap().to_owned(), outcome.version.clone());
                }
                out.insert("applied".into(), json!(outcome.applied));
            }
            "get" => {
                let got = self.client(step).get(self.key(step, "key")).await?;
                out.insert(
                    "value".into(),
                    canonical_opt(got.as_ref().map(|v| &v.value[..])),
                );
            }
            "del" => {
                let n = self
                    .client(step)
                    .del(self.key(step, "key"), self.token(step).as_ref())
                    .await?;
                out.insert("deleted".into(), json!(n));
            }
            "vdel" => {
                let outcome = self
                    .client(step)
                    .vdel(
                        self.key(step, "key"),
                        Bytes::from(bytes_of(&step["value"])),
                        self.token(step).as_ref(),
                    )
                    .await?;
                let name = match outcome {
                    VdelOutcome::Deleted => "deleted",
                    VdelOutcome::NotFound => "not_found",
                    VdelOutcome::ValueMismatch => "value_mismatch",
                };
                out.insert("outcome".into(), json!(name));
            }
            "observe" => {
                let observation = self.client(step).observe(self.key(step, "key")).await?;
                self.observers.insert(str_of("observer"), observation);
            }
            "expect_notification" => {
                let name = str_of("observer");
                let observation = self
                    .observers
                    .get_mut(&name)
                    .unwrap_or_else(|| panic!("no observer {name:?}"));
                let n = tokio::time::timeout(WAIT, observation.recv())
                    .await
                    .unwrap_or_else(|_| panic!("no notification within {WAIT:?}"))
                    .expect("the observation ended")?;
                let (operation, value) = match n.operation {
                    NotifyOperation::Set(v) => ("set", Some(v)),
                    NotifyOperation::Delete => ("delete", None),
                };
                out.insert("operation".into(), json!(operation));
                if let Some(v) = value {
                    out.insert("value".into(), canonical(&v));
                }
            }
            "flood" => {
                let client = self.client(step).clone();
                let key = self.key(step, "key");
                for i in 0..u64_of("count") {
                    let outcome = client
                        .set(key.clone(), i.to_string(), SetOptions::default())
                        .await?;
                    assert!(outcome.applied, "flood: SET #{i} not applied");
                }
            }
            "expect_lagged" => {
                let name = str_of("observer");
                let total = u64_of("total");
                let observation = self
                    .observers
                    .get_mut(&name)
                    .unwrap_or_else(|| panic!("no observer {name:?}"));
                let (mut received, mut lost, mut lags) = (0u64, 0u64, 0u64);
                while received + lost < total {
                    let item = tokio::time::timeout(WAIT, observation.recv())
                        .await
                        .unwrap_or_else(|_| {
                            panic!("stuck after {received} notifications and {lost} lost")
                        })
                        .expect("the observation ended");
                    match item {
                        Ok(n) => {
                            assert!(
                                matches!(n.operation, NotifyOperation::Set(_)),
                                "a flood gives set notifications only"
                            );
                            received += 1;
                        }
                        Err(e) if e.kind() == ErrorKind::Lagged => {
                            // The count as a number (Error::missed), as every binding gives it.
                            let n = e.missed().filter(|n| *n > 0);
                            lost += n.unwrap_or_else(|| panic!("lagged without a count: {e}"));
                            lags += 1;
                        }
                        Err(e) => return Err(e),
                    }
                }
                assert_eq!(received + lost, total, "notifications read plus lost");
                assert!(
                    lags >= 1,
                    "no lagged error after {total} unread notifications"
                );
                println!("    lagged: {received} read, {lost} lost in {lags} lagged error(s)");
            }
            "hlc" => {
                let hlc = Hlc::try_new(u64_of("ms"), u64_of("counter"), str_of("node_id"))?;
                out.insert("text".into(), json!(hlc.to_string()));
            }
            "lease_acquire" => {
                let lease = Lease::new(
                    self.client(step),
                    self.key(step, "name"),
                    bytes_of(&step["holder"]),
                )?;
                let token = lease.acquire(ms(u64_of("ttl_ms"))).await?;
                if let (Some(name), Some(token)) = (step.get("save_token"), &token) {
                    self.tokens
                        .insert(name.as_str().unwrap().to_owned(), token.clone());
                }
                out.insert("acquired".into(), json!(token.is_some()));
                self.leases.insert(str_of("lease"), lease);
            }
            "lease_auto_renew" => {
                let name = str_of("lease");
                let lease = &self.leases[&name];
                let events = lease.events();
                let fraction = step["fraction"].as_f64().expect("fraction is a number");
                lease.auto_renew(fraction)?;
                self.lease_events.insert(name, events);
            }
            "expect_lease_event" => {
                let name = str_of("lease");
                let skip: Vec<String> = step
                    .get("skip")
                    .map(|s| serde_json::from_value(s.clone()).expect("skip: names"))
                    .unwrap_or_default();
                let events = self
                    .lease_events
                    .get_mut(&name)
                    .unwrap_or_else(|| panic!("no events of lease {name:?}"));
                let wanted = str_of("event");
                loop {
                    let event = tokio::time::timeout(WAIT, events.recv())
                        .await
                        .unwrap_or_else(|_| panic!("no lease event within {WAIT:?}"))
                        .expect("the lease's events ended");
                    let got = event.name();
                    if got == wanted {
                        break;
                    }
                    assert!(
                        skip.iter().any(|s| s == got),
                        "lease event {got:?}, expected {wanted:?}"
                    );
                }
            }
            "lease_release" => {
                let lease = &self.leases[&str_of("lease")];
                out.insert("released".into(), json!(lease.release().await?));
            }
            "lock" => {
                let mut lock = Lock::new(
                    self.client(step),
                    self.key(step, "name"),
                    bytes_of(&step["holder"]),
                )?;
                if let Some(session) = step.get("session") {
                    lock = lock.with_session_id(bytes_of(session));
                }
                let guard = lock
                    .lock(ms(u64_of("ttl_ms")), ms(u64_of("timeout_ms")))
                    .await?;
                out.insert("locked".into(), json!(true));
                self.locks.insert(str_of("lock"), (lock, Some(guard)));
            }
            "lock_edit" => {
                let lock = Lock::new(
                    self.client(step),
                    self.key(step, "name"),
                    bytes_of(&step["holder"]),
                )?;
                let new_value = match &step["new_value"] {
                    Value::Null => None,
                    v => Some(Bytes::from(bytes_of(v))),
                };
                let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
                let seen_in_edit = seen.clone();
                let written = lock
                    .edit_async(
                        self.key(step, "key"),
                        ms(u64_of("ttl_ms")),
                        ms(u64_of("timeout_ms")),
                        move |old: Option<Bytes>| {
                            *seen_in_edit.lock().unwrap() = Some(old);
                            async move { Ok::<_, Error>(new_value) }
                        },
                    )
                    .await?;
                let old = seen
                    .lock()
                    .unwrap()
                    .take()
                    .expect("the edit function was not called");
                out.insert("old".into(), canonical_opt(old.as_deref()));
                out.insert("value".into(), canonical_opt(written.as_deref()));
            }
            "unlock" => {
                let name = str_of("lock");
                let guard = self
                    .locks
                    .get_mut(&name)
                    .and_then(|(_, g)| g.take())
                    .unwrap_or_else(|| panic!("lock {name:?} is not held"));
                out.insert("unlocked".into(), json!(guard.unlock().await?));
            }
            "try_campaign" => {
                let election = LeaderElection::new(
                    self.client(step),
                    self.key(step, "name"),
                    bytes_of(&step["candidate"]),
                )?;
                let token = election.try_campaign(ms(u64_of("term_ms"))).await?;
                out.insert("elected".into(), json!(token.is_some()));
                self.elections.insert(str_of("election"), election);
            }
            "leader" => {
                let leader = self.elections[&str_of("election")].leader().await?;
                out.insert("leader".into(), canonical_opt(leader.as_deref()));
            }
            "resign" => {
                let resigned = self.elections[&str_of("election")].resign().await?;
                out.insert("resigned".into(), json!(resigned));
            }
            "fill" => {
                let client = self.client(step).clone();
                let prefix = self.key(step, "prefix");
                let start = step.get("start").map_or(0, |v| v.as_u64().unwrap());
                let delete = step["delete"] == json!(true);
                for i in start..start + u64_of("count") {
                    let mut key = prefix.to_vec();
                    key.extend_from_slice(format!("{i:04}").as_bytes());
                    if delete {
                        assert_eq!(client.del(key, None).await?, 1, "fill: DEL #{i}");
                    } else {
                        let outcome = client.set(key, "v", SetOptions::default()).await?;
                        assert!(outcome.applied, "fill: SET #{i} not applied");
                    }
                }
            }
            "scan" => {
                let mut keys = self
                    .client(step)
                    .scan(self.key(step, "pattern"))?
                    .into_keys();
                let mut listed = Vec::new();
                while let Some(key) =
                    std::future::poll_fn(|cx| std::pin::Pin::new(&mut keys).poll_next(cx)).await
                {
                    listed.push(key?);
                }
                out.insert("count".into(), json!(listed.len()));
                out.insert("keys".into(), self.listed(&listed));
            }
            "scan_open" => {
                let scan = self.client(step).scan(self.key(step, "pattern"))?;
                self.scans.insert(str_of("scan"), (scan, Vec::new()));
            }
            "scan_page" => {
                let name = str_of("scan");
                let (scan, listed) = self
                    .scans
                    .get_mut(&name)
                    .unwrap_or_else(|| panic!("no scan {name:?}"));
                let page = scan.next_page().await?;
                listed.extend(page.unwrap_or_default());
                out.insert("done".into(), json!(scan.is_done()));
            }
            "scan_rest" => {
                let name = str_of("scan");
                let (mut scan, mut listed) = self
                    .scans
                    .remove(&name)
                    .unwrap_or_else(|| panic!("no scan {name:?}"));
                while let Some(page) = scan.next_page().await? {
                    listed.extend(page);
                }
                let seen: std::collections::HashSet<&[u8]> =
                    listed.iter().map(|k| &k[..]).collect();
                let mut missing: Vec<Bytes> = step["must_include"]
                    .as_array()
                    .expect("must_include: a list of keys")
                    .iter()
                    .map(|k| {
                        let mut key = self.prefix.as_bytes().to_vec();
                        key.extend_from_slice(&bytes_of(k));
                        Bytes::from(key)
                    })
                    .filter(|k| !seen.contains(&k[..]))
                    .collect();
                missing.sort();
                out.insert("missing".into(), self.listed(&missing));
                out.insert("count".into(), json!(listed.len()));
            }
            other => panic!("unknown step type {other:?}"),
        }
        Ok(out)
    }

    /// Compares a step's outcome with its `expect`.
    fn check(&self, step: &Value, outcome: Outcome) {
        let expect = step.get("expect").cloned().unwrap_or_else(|| json!({}));
        let expect = expect.as_object().expect("expect is an object");
        match (expect.get("error"), outcome) {
            (Some(kind), Err(e)) => {
                let kind = kind.as_str().expect("error: a kind");
                if kind != "any" {
                    assert_eq!(e.kind().as_str(), kind, "error kind of {e}");
                }
                if let Some(service) = expect.get("service") {
                    let Error::Service(s) = &e else {
                        panic!("expected a service error, got {e}")
                    };
                    assert_eq!(s.kind_str(), service.as_str().unwrap(), "service kind");
                }
                for part in expect
                    .get("message_contains")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let part = self.subst(part.as_str().unwrap());
                    assert!(
                        e.to_string().contains(&part),
                        "the message {:?} does not contain {part:?}",
                        e.to_string()
                    );
                }
            }
            (Some(kind), Ok(out)) => panic!("expected an error of kind {kind}, got {out:?}"),
            (None, Err(e)) => panic!("unexpected error ({}): {e}", e.kind().as_str()),
            (None, Ok(out)) => {
                for (field, want) in expect {
                    let want = if BYTE_FIELDS.contains(&field.as_str()) && !want.is_null() {
                        canonical(&bytes_of(want))
                    } else {
                        want.clone()
                    };
                    let got = out.get(field).unwrap_or_else(|| {
                        panic!("the step gives no {field:?} (it gives {out:?})")
                    });
                    assert_eq!(got, &want, "{field}");
                }
            }
        }
    }
}

/// Fails on an unknown step type or a field that step does not take.
fn validate(file: &str, index: usize, step: &Value) -> String {
    let obj = step
        .as_object()
        .unwrap_or_else(|| panic!("{file} step {index}: not an object"));
    let op = obj
        .get("op")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{file} step {index}: no op"));
    let fields = STEPS
        .iter()
        .find(|(name, _)| *name == op)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("{file} step {index}: unknown step type {op:?}"));
    for field in obj.keys() {
        assert!(
            ["op", "client", "expect"].contains(&field.as_str())
                || fields.contains(&field.as_str()),
            "{file} step {index}: step {op:?} takes no field {field:?}"
        );
    }
    op.to_owned()
}

fn scenario_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/scenarios"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    // MQSTATE_SCENARIO=name runs only the scenarios whose file name contains it.
    if let Ok(only) = std::env::var("MQSTATE_SCENARIO") {
        files.retain(|p| p.to_string_lossy().contains(&only));
    }
    files.sort();
    assert!(!files.is_empty(), "no scenarios in {}", dir.display());
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shared_behaviour_scenarios() {
    let store = TestStore::start(Backend::Embedded, "scenarios")
        .await
        .expect("the embedded store always starts");
    // Accepts TCP connections (the kernel does, into the backlog) and never answers.
    let blackhole = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let server_url = format!("mqtt://{}:{}", store.host(), store.port());
    let run_id = format!("{}-{}", std::process::id(), fastrand_suffix());
    let (mut scenarios, mut steps, mut not_run) = (0, 0, 0);
    for path in scenario_files() {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let list = doc["steps"]
            .as_array()
            .unwrap_or_else(|| panic!("{file}: no steps"));
        let name = file.trim_end_matches(".json");
        if let Some(reason) = not_run_reason(&file, &doc, "rust") {
            println!("scenario {name}: NOT RUN in Rust: {reason}");
            not_run += 1;
            continue;
        }
        println!("scenario {name} ({} steps)", list.len());
        let mut run = Run {
            server_url: server_url.clone(),
            blackhole_port: blackhole.local_addr().unwrap().port(),
            uid: format!("{run_id}-{name}"),
            prefix: format!("scenarios/rust/{run_id}/{name}/"),
            clients: HashMap::new(),
            observers: HashMap::new(),
            tokens: HashMap::new(),
            leases: HashMap::new(),
            lease_events: HashMap::new(),
            locks: HashMap::new(),
            elections: HashMap::new(),
            scans: HashMap::new(),
        };
        for (i, step) in list.iter().enumerate() {
            let op = validate(&file, i + 1, step);
            let _context = StepContext(format!("{file} step {}: {step}", i + 1));
            let outcome = run.execute(&op, step).await;
            run.check(step, outcome);
            steps += 1;
        }
        for (_, client) in run.clients.drain() {
            client.close().await;
        }
        scenarios += 1;
    }
    println!("rust: {scenarios} scenarios, {steps} steps passed ({not_run} not run)");
    store.shutdown().await;
}

/// Checks a scenario's top-level fields; `Some(reason)` when it says `language` cannot run it.
fn not_run_reason(file: &str, doc: &Value, language: &str) -> Option<String> {
    let obj = doc
        .as_object()
        .unwrap_or_else(|| panic!("{file}: not an object"));
    for key in obj.keys() {
        assert!(
            ["description", "not_in", "steps"].contains(&key.as_str()),
            "{file}: unknown top-level field {key:?}"
        );
    }
    let not_in = obj.get("not_in")?.as_object().expect("not_in: an object");
    for (lang, reason) in not_in {
        assert!(
            ["rust", "c", "python", "node"].contains(&lang.as_str()),
            "{file}: not_in names an unknown language {lang:?}"
        );
        assert!(
            reason.as_str().is_some_and(|r| !r.is_empty()),
            "{file}: not_in.{lang} must give the reason"
        );
    }
    not_in
        .get(language)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Names the failing step when a step panics.
struct StepContext(String);

impl Drop for StepContext {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("FAILED at {}", self.0);
        }
    }
}

/// A few random digits, so that two runs of the suite never share keys.
fn fastrand_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{nanos:09}")
}
