//! [`ConnectOptions::from_url`]: the one URL parser, with its percent-decoding.

use std::time::Duration;

use super::{ConnectOptions, TlsOptions};
use crate::protocol::errors::Error;

impl ConnectOptions {
    /// Parses `mqtt://[user[:password]@]host[:port][?query]` (plain TCP, default port 1883)
    /// or `mqtts://...` (TLS, default port 8883); `tcp://` and `ssl://` are synonyms. This is
    /// the one URL parser: every binding passes its URL here unchanged.
    ///
    /// Query parameters (percent-decoded, like the user and password):
    ///
    /// | parameter | meaning |
    /// |---|---|
    /// | `client_id` | MQTT client id (no `:`; default: a generated `mqstate-...` id) |
    /// | `keep_alive` | MQTT keep-alive, whole seconds, 5 to 65535 (default 60) |
    /// | `session_expiry` | how long the broker keeps the session, whole seconds (default 3600) |
    /// | `request_timeout_ms` | default timeout of every request, ms, > 0 (default 10000) |
    /// | `connect_timeout_ms` | one connection attempt, ms, at least 1000 (default 10000) |
    /// | `ca_file` | PEM CA bundle to trust (`mqtts://` only; default: the platform's roots) |
    /// | `cert_file`, `key_file` | client certificate and key for mutual TLS (`mqtts://` only) |
    /// | `server_name` | the name the broker's certificate must be valid for (`mqtts://` only) |
    /// | `sat_file` | Kubernetes service account token file (`K8S-SAT` authentication) |
    /// | `password_file` | file holding the MQTT password, read at every connection |
    ///
    /// Any other parameter, scheme or malformed part is an [`Error::InvalidArgument`] that
    /// names it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate::ConnectOptions;
    ///
    /// let o = ConnectOptions::from_url("mqtts://app:p%40ss@[::1]:18883?ca_file=/tmp/ca.pem&keep_alive=20").unwrap();
    /// assert_eq!((o.host.as_str(), o.port), ("::1", 18883));
    /// assert_eq!(o.password.as_deref(), Some("p@ss"));
    /// assert_eq!(o.keep_alive, Duration::from_secs(20));
    /// assert!(o.tls.unwrap().ca_file.is_some());
    ///
    /// assert!(ConnectOptions::from_url("http://host").is_err());
    /// assert!(ConnectOptions::from_url("mqtt://host?colour=blue").is_err());
    /// ```
    pub fn from_url(url: &str) -> Result<Self, Error> {
        let bad = |what: String| Error::InvalidArgument(format!("broker URL {url:?}: {what}"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected mqtt://host[:port] or mqtts://host[:port]".into()))?;
        let use_tls = match scheme.to_ascii_lowercase().as_str() {
            "mqtt" | "tcp" => false,
            "mqtts" | "ssl" => true,
            other => {
                return Err(bad(format!(
                    "unsupported scheme {other:?} (use mqtt:// or mqtts://)"
                )));
            }
        };
        let (authority, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        if authority.contains('/') {
            return Err(bad("a path is not allowed".into()));
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = split_host_port(hostport).map_err(bad)?;
        let port = port.unwrap_or(Self::default_port(use_tls));
        let mut options = ConnectOptions::new(host, port);
        if use_tls {
            options.tls = Some(TlsOptions::default());
        }
        if let Some(userinfo) = userinfo {
            let (user, password) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            if user.is_empty() {
                return Err(bad("user: empty user name before '@'".into()));
            }
            options.username = Some(percent_decode(user).map_err(|e| bad(format!("user: {e}")))?);
            if let Some(p) = password {
                options.password =
                    Some(percent_decode(p).map_err(|e| bad(format!("password: {e}")))?);
            }
        }
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value =
                percent_decode(value).map_err(|e| bad(format!("query parameter {name}: {e}")))?;
            let secs = |v: &str| {
                v.parse::<u64>()
                    .map(Duration::from_secs)
                    .map_err(|_| bad(format!("{name} must be whole seconds, got {v:?}")))
            };
            match name {
                "client_id" => options.client_id = Some(value),
                "keep_alive" => options.keep_alive = secs(&value)?,
                "session_expiry" => options.session_expiry = secs(&value)?,
                "request_timeout_ms" => {
                    options.request_timeout = value
                        .parse::<u64>()
                        .map(Duration::from_millis)
                        .map_err(|_| {
                            bad(format!(
                                "request_timeout_ms must be whole milliseconds, got {value:?}"
                            ))
                        })?;
                }
                "connect_timeout_ms" => {
                    options.connect_timeout = value
                        .parse::<u64>()
                        .map(Duration::from_millis)
                        .map_err(|_| {
                            bad(format!(
                                "connect_timeout_ms must be whole milliseconds, got {value:?}"
                            ))
                        })?;
                }
                "ca_file" | "cert_file" | "key_file" | "server_name" => {
                    let tls = options.tls.get_or_insert_with(TlsOptions::default);
                    match name {
                        "ca_file" => tls.ca_file = Some(value.into()),
                        "cert_file" => tls.client_cert_file = Some(value.into()),
                        "key_file" => tls.client_key_file = Some(value.into()),
                        _ => tls.server_name = Some(value),
                    }
                    if !use_tls {
                        return Err(bad(format!("{name} needs the mqtts:// scheme")));
                    }
                }
                "sat_file" => options.sat_file = Some(value.into()),
                "password_file" => options.password_file = Some(value.into()),
                other => return Err(bad(format!("unknown query parameter {other:?}"))),
            }
        }
        options.validate()?;
        Ok(options)
    }
}

/// Splits `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "unterminated [IPv6] host".to_string())?;
        match after {
            "" => (host, None),
            p => (
                host,
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| format!("unexpected {p:?} after the host"))?,
                ),
            ),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("the host is empty".into());
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(format!("port {p:?} is not a number 1-65535")),
        },
    };
    Ok((host.to_owned(), port))
}

/// Decodes `%XX` escapes (and nothing else); the result must be UTF-8.
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape at byte {i}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 after percent-decoding".to_string())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn url_defaults() {
        let o = ConnectOptions::from_url("mqtt://localhost").unwrap();
        assert_eq!((o.host.as_str(), o.port), ("localhost", 1883));
        assert!(o.tls.is_none() && o.username.is_none());
        let o = ConnectOptions::from_url("mqtts://h").unwrap();
        assert_eq!(o.port, 8883);
        assert_eq!(o.tls, Some(TlsOptions::default()));
        let o = ConnectOptions::from_url("MQTT://h:1/").unwrap();
        assert_eq!(o.port, 1);
    }

    #[test]
    fn url_full() {
        let o = ConnectOptions::from_url(
            "mqtts://u%3Ax:p@example.com:8884?client_id=a%2Fb&session_expiry=0&request_timeout_ms=250&cert_file=c&key_file=k&server_name=srv&sat_file=/t&password_file=/p",
        )
        .unwrap();
        assert_eq!(o.username.as_deref(), Some("u:x"));
        assert_eq!(o.password.as_deref(), Some("p"));
        assert_eq!(o.client_id.as_deref(), Some("a/b"));
        assert_eq!(o.session_expiry, Duration::ZERO);
        assert_eq!(o.request_timeout, Duration::from_millis(250));
        let tls = o.tls.unwrap();
        assert_eq!(tls.server_name.as_deref(), Some("srv"));
        assert!(tls.client_cert_file.is_some() && tls.client_key_file.is_some());
        assert_eq!(o.sat_file, Some(PathBuf::from("/t")));
        assert_eq!(o.password_file, Some(PathBuf::from("/p")));
    }

    #[test]
    fn url_errors_name_the_problem() {
        for (url, needle) in [
            ("127.0.0.1:1883", "expected mqtt://"),
            ("ws://h", "unsupported scheme"),
            ("mqtt://", "host is empty"),
            ("mqtt://h:0", "port"),
            ("mqtt://h:99999", "port"),
            ("mqtt://h:x", "port"),
            ("mqtt://[::1", "IPv6"),
            ("mqtt://h/path", "path"),
            ("mqtt://h?keep_alive=soon", "keep_alive"),
            ("mqtt://h?keep_alive=1", "keep-alive"),
            ("mqtt://h?nope=1", "nope"),
            ("mqtt://h?ca_file=x", "mqtts"),
            ("mqtt://h?client_id=%zz", "percent"),
            ("mqtt://h?client_id=", "client id is empty"),
            ("mqtt://:pw@h", "user"),
        ] {
            let err = ConnectOptions::from_url(url).expect_err(url);
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument, "{url}");
            let msg = err.to_string();
            assert!(msg.contains(needle), "{url}: {msg}");
        }
    }

    #[test]
    fn url_ipv6() {
        let o = ConnectOptions::from_url("mqtt://[::1]").unwrap();
        assert_eq!((o.host.as_str(), o.port), ("::1", 1883));
    }
}
