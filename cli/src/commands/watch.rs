//! `mqstate watch KEY...`: one line per change of the keys, until Ctrl-C.
//!
//! The core client reconnects by itself and re-registers the keys; a change made while it
//! was away arrives as a synthesized notification (marked as such). Connection changes are
//! reported on stderr, so stdout stays one line per change.

use std::ffi::OsString;
use std::time::SystemTime;

use clap::Args;
use mqstate::{ConnectionState, Error, KeyNotification, NotifyOperation};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::{key_arg, show_key, stdout_failure};
use crate::connect::ConnectArgs;
use crate::exit::{Code, Failure, Outcome};
use crate::output;
use crate::signals::Interrupts;

/// The flags of `mqstate watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The keys to watch.
    #[arg(required = true, value_name = "KEY")]
    pub keys: Vec<OsString>,

    /// One JSON object a line: time, key, op, value, version, synthesized.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// Runs `watch` until Ctrl-C (exit code 0) or until the client is closed.
pub async fn run(args: WatchArgs) -> Outcome {
    let keys = args
        .keys
        .iter()
        .map(key_arg)
        .collect::<Result<Vec<_>, _>>()?;
    let mut interrupts = Interrupts::new()?;
    let client = args.connect.connect().await?;
    let (tx, mut rx) = mpsc::channel::<(Vec<u8>, Result<KeyNotification, Error>)>(256);
    for key in &keys {
        let mut changes = client
            .observe(key)
            .await
            .map_err(|e| Failure::from_error(&format!("watch {}", show_key(key)), &e))?;
        let tx = tx.clone();
        let key = key.clone();
        tokio::spawn(async move {
            while let Some(item) = changes.recv().await {
                if tx.send((key.clone(), item)).await.is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let mut states = client.state_changes();
    let outcome = loop {
        tokio::select! {
            item = rx.recv() => match item {
                Some((_, Ok(n))) => {
                    if let Err(e) = output::write_line(&format_line(&n, SystemTime::now(), args.json)) {
                        break stdout_failure(e);
                    }
                }
                Some((key, Err(e))) => eprintln!("mqstate: watch {}: {e}", show_key(&key)),
                None => break Err(Failure::new(Code::Connection, "watch: the connection was closed")),
            },
            changed = states.changed() => {
                if changed.is_err() {
                    break Err(Failure::new(Code::Connection, "watch: the connection was closed"));
                }
                let state = *states.borrow_and_update();
                match state {
                    ConnectionState::Reconnecting => eprintln!("mqstate: watch: connection lost, reconnecting"),
                    ConnectionState::Connected => eprintln!("mqstate: watch: reconnected"),
                    _ => {}
                }
            }
            () = interrupts.recv() => break Ok(Code::Success),
        }
    };
    client.close().await;
    outcome
}

/// One change as a line of text (`TIME KEY SET VALUE VERSION [synthesized]`) or JSON.
fn format_line(n: &KeyNotification, now: SystemTime, json: bool) -> String {
    let time = humantime::format_rfc3339_millis(now).to_string();
    let version = n.version.as_ref().map(ToString::to_string);
    let op = match n.operation {
        NotifyOperation::Set(_) => "SET",
        NotifyOperation::Delete => "DELETE",
    };
    if json {
        let mut object = Map::new();
        object.insert("time".into(), Value::String(time));
        output::put_bytes(&mut object, "key", &n.key);
        object.insert("op".into(), Value::String(op.into()));
        match n.value() {
            Some(v) => output::put_bytes(&mut object, "value", v),
            None => {
                object.insert("value".into(), Value::Null);
            }
        }
        object.insert("version".into(), version.map_or(Value::Null, Value::String));
        object.insert("synthesized".into(), Value::Bool(n.synthesized));
        return Value::Object(object).to_string();
    }
    let mut line = format!("{time} {} {op}", output::escape(&n.key));
    if let Some(v) = n.value() {
        line.push(' ');
        line.push_str(&output::escape(v));
    }
    line.push(' ');
    line.push_str(version.as_deref().unwrap_or("-"));
    if n.synthesized {
        line.push_str(" (synthesized after a reconnect)");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use mqstate::Hlc;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn lines_and_json_lines() {
        let at = UNIX_EPOCH + Duration::from_millis(1_732_300_000_123);
        let n = KeyNotification::new(
            "door",
            NotifyOperation::Set("open".into()),
            Some(Hlc::new(1_732_300_000_120, 0, "StateStore")),
        );
        assert_eq!(
            format_line(&n, at, false),
            "2024-11-22T18:26:40.123Z door SET open 001732300000120:00000:StateStore"
        );
        assert_eq!(
            format_line(&n, at, true),
            r#"{"key":"door","op":"SET","synthesized":false,"time":"2024-11-22T18:26:40.123Z","value":"open","version":"001732300000120:00000:StateStore"}"#
        );
        let mut d = KeyNotification::new("door", NotifyOperation::Delete, None);
        d.synthesized = true;
        assert_eq!(
            format_line(&d, at, false),
            "2024-11-22T18:26:40.123Z door DELETE - (synthesized after a reconnect)"
        );
    }
}
