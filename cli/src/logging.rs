//! Logging to stderr through `tracing`: the events of the core (connection lost and why,
//! reconnecting, the store restarted) and of the server. `mqstate serve` logs at info unless
//! told otherwise; the client commands log only when asked, with `--log` or `RUST_LOG`, so
//! that their stderr stays one line per failure.

use tracing_subscriber::EnvFilter;

/// A bare level applies to mqstate; the embedded broker's own logs (one line per client
/// connection at info) stay at warn unless a full filter asks for them.
fn log_filter(spec: &str) -> String {
    if spec.contains('=') || spec.contains(',') {
        spec.to_owned()
    } else {
        format!("{spec},mqtt5=warn")
    }
}

/// Logs to stderr with `flag` (the value of `--log`), else `RUST_LOG`, else `default`; with
/// none of them, logs nothing. A malformed `--log` is an error that names it (a malformed
/// `RUST_LOG` is passed over, as when it is unset). A second call keeps the first set-up.
pub fn init(flag: Option<&str>, default: Option<&str>) -> Result<(), String> {
    let filter = match (flag, EnvFilter::try_from_default_env()) {
        (Some(f), _) => {
            EnvFilter::try_new(log_filter(f)).map_err(|e| format!("--log {f:?}: {e}"))?
        }
        (None, Ok(env)) => env,
        (None, Err(_)) => match default {
            Some(d) => EnvFilter::new(log_filter(d)),
            None => return Ok(()),
        },
    };
    // Already set up (a command that connects more than once): keep that one.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_level_keeps_the_broker_at_warn() {
        assert_eq!(log_filter("debug"), "debug,mqtt5=warn");
        assert_eq!(log_filter("debug,mqtt5=info"), "debug,mqtt5=info");
        assert_eq!(log_filter("mqstate=trace"), "mqstate=trace");
    }

    #[test]
    fn a_malformed_flag_is_an_error_naming_it() {
        let err = init(Some("info,mqstate=nonsense"), None).unwrap_err();
        assert!(err.starts_with("--log \"info,mqstate=nonsense\""), "{err}");
    }
}
