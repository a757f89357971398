//! [`AccessControl`]: the embedded broker's authentication and authorization.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use mqtt5::broker::PasswordAuthProvider;
use mqtt5::broker::auth::{AuthProvider, AuthResult, EnhancedAuthResult};
use mqtt5::packet::connect::ConnectPacket;
use mqtt5::protocol::v5::reason_codes::ReasonCode;

use super::SecurityConfig;
use super::error::SecurityError;
use super::rules::RuleSet;
use super::tokens::TokenSet;

/// The enhanced authentication method of Kubernetes service account tokens.
pub(crate) const K8S_SAT_METHOD: &str = "K8S-SAT";

/// The user name the state store itself connects as (with a random password made at start;
/// it is allowed every topic). Not accepted from the password file.
pub const STORE_USER: &str = "$mqstate-store";

/// The request topic of the state store protocol.
const REQUEST_TOPIC: &str = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";
/// The prefix of notification topics; the next level is the client id in upper-case hex.
const NOTIFY_PREFIX: &str = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/";

/// Whether `topic` (a topic name or a filter) belongs to `client_id`: it lies under
/// `clients/{client id}/` (responses), or is one of the client's notification topics
/// (`clients/statestore/v1/FA9AE35F-.../{HEX(client id)}/command/notify/...`).
pub(crate) fn owns_topic(client_id: &str, topic: &str) -> bool {
    if client_id.is_empty() || client_id.contains(['/', '+', '#']) {
        return false;
    }
    if let Some(rest) = topic.strip_prefix(NOTIFY_PREFIX) {
        let hex: String = client_id.bytes().map(|b| format!("{b:02X}")).collect();
        return rest
            .strip_prefix(hex.as_str())
            .and_then(|r| r.strip_prefix("/command/notify/"))
            .is_some();
    }
    topic
        .strip_prefix("clients/")
        .and_then(|r| r.strip_prefix(client_id))
        .and_then(|r| r.strip_prefix('/'))
        .is_some()
}

/// Password checks in flight at once at most: each is an argon2 verification (about 20 ms of
/// CPU and 19 MiB of memory), run on tokio's blocking pool so that guesses never hold the
/// broker's async workers, and bounded so that a flood of them cannot take every core.
const PASSWORD_CHECKS: usize = 2;

/// Failed logins from one address that pass without delay.
const FREE_FAILURES: u32 = 5;
/// The delay before the first throttled attempt; it doubles with each further failure.
const FIRST_DELAY: Duration = Duration::from_millis(100);
/// The longest delay between two password checks of one address.
const MAX_DELAY: Duration = Duration::from_secs(10);
/// An address's failures are forgotten after this long without one.
const FORGET_AFTER: Duration = Duration::from_secs(300);

/// Failed logins per source address, and when each address may next have a password checked
/// (docs/security.md, "Logins").
#[derive(Debug, Default)]
struct Throttle {
    by_address: HashMap<IpAddr, Failures>,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    /// The next attempt from this address is checked no earlier than this.
    next_slot: Instant,
}

impl Throttle {
    /// When an attempt from `ip` may be checked: now while it has failed at most
    /// [`FREE_FAILURES`] times, else the next free slot, which moves on by the delay, so
    /// that parallel connections from one address are checked one delay apart too.
    fn slot(&mut self, ip: IpAddr, now: Instant) -> Instant {
        let Some(f) = self.by_address.get_mut(&ip) else {
            return now;
        };
        if now.duration_since(f.last) > FORGET_AFTER {
            self.by_address.remove(&ip);
            return now;
        }
        if f.count < FREE_FAILURES {
            return now;
        }
        let slot = f.next_slot.max(now);
        f.next_slot = slot + delay_after(f.count);
        slot
    }

    fn failed(&mut self, ip: IpAddr, now: Instant) {
        if self.by_address.len() >= 65_536 {
            // Bounded: addresses whose failures are old go first.
            self.by_address
                .retain(|_, f| now.duration_since(f.last) <= FORGET_AFTER);
        }
        let f = self.by_address.entry(ip).or_insert(Failures {
            count: 0,
            last: now,
            next_slot: now,
        });
        f.count = f.count.saturating_add(1);
        f.last = now;
        if f.count >= FREE_FAILURES {
            f.next_slot = f.next_slot.max(now + delay_after(f.count));
        }
    }

    fn succeeded(&mut self, ip: IpAddr) {
        self.by_address.remove(&ip);
    }
}

/// The wait before the next check of an address that failed `count` times (more than
/// [`FREE_FAILURES`]): 100 ms, doubling, at most 10 s.
fn delay_after(count: u32) -> Duration {
    let doublings = count.saturating_sub(FREE_FAILURES).min(16);
    FIRST_DELAY.saturating_mul(1 << doublings).min(MAX_DELAY)
}

/// Authentication (password file, K8S-SAT tokens, the store's own credentials) and
/// authorization (own topics plus the rule file) for the embedded broker.
pub struct AccessControl {
    passwords: Arc<PasswordAuthProvider>,
    /// A hash of a random password, verified for an unknown user so that a wrong user name
    /// costs what a wrong password costs (no user enumeration by timing).
    dummy_hash: Arc<str>,
    checks: Arc<tokio::sync::Semaphore>,
    throttle: Mutex<Throttle>,
    tokens: Option<TokenSet>,
    rules: RuleSet,
    /// Without a password or SAT file, clients connect anonymously and are not confined.
    confine: bool,
}

impl std::fmt::Debug for AccessControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessControl")
            .field("users", &self.passwords.user_count())
            .field("tokens", &self.tokens.is_some())
            .field("rules", &self.rules)
            .field("confine", &self.confine)
            .finish_non_exhaustive()
    }
}

impl AccessControl {
    /// Reads the files named by `config` and adds the store's own user with `store_password`.
    pub async fn load(
        config: &SecurityConfig,
        store_password: &str,
    ) -> Result<AccessControl, SecurityError> {
        let passwords = match &config.password_file {
            Some(path) => {
                let p = PasswordAuthProvider::from_file(path).await.map_err(|e| {
                    SecurityError::config_caused(format!("password file {}", path.display()), e)
                })?;
                if p.has_user(STORE_USER) {
                    return Err(SecurityError::config(format!(
                        "password file {}: the user name {STORE_USER} is reserved",
                        path.display()
                    )));
                }
                p
            }
            None => PasswordAuthProvider::new(),
        };
        passwords
            .add_user(STORE_USER.to_owned(), store_password)
            .map_err(|e| SecurityError::config_caused("cannot hash the store's password", e))?;
        for file in [&config.password_file, &config.sat_file]
            .into_iter()
            .flatten()
        {
            if let Some(warning) = super::loose_permissions(file) {
                tracing::warn!("{warning}");
            }
        }
        let tokens = config.sat_file.as_deref().map(TokenSet::load).transpose()?;
        let rules = match &config.rules_file {
            Some(path) => RuleSet::load(path)?,
            None => RuleSet::default(),
        };
        for rule in rules.client_prefix_rules() {
            // A client id is chosen by the client: docs/security.md, "Rules".
            tracing::warn!(
                rule = ?rule,
                "a rule grants by client id prefix: any authenticated client that picks an id \
                 with this prefix gets it; prefer user:NAME rules"
            );
        }
        let dummy_hash = super::hash_password(&format!("{:?}", Instant::now()))?;
        Ok(AccessControl {
            passwords: Arc::new(passwords.with_anonymous(!config.authenticates())),
            dummy_hash: Arc::from(dummy_hash),
            checks: Arc::new(tokio::sync::Semaphore::new(PASSWORD_CHECKS)),
            throttle: Mutex::new(Throttle::default()),
            tokens,
            rules,
            confine: config.authenticates(),
        })
    }

    fn is_store(user: Option<&str>) -> bool {
        user == Some(STORE_USER)
    }

    fn throttle(&self) -> std::sync::MutexGuard<'_, Throttle> {
        self.throttle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks a user name and password: after the address's throttle slot, on the blocking
    /// pool (at most [`PASSWORD_CHECKS`] at once), an unknown user against a dummy hash.
    async fn check_password(
        &self,
        user: &str,
        password: &[u8],
        client_addr: SocketAddr,
    ) -> mqtt5::Result<AuthResult> {
        let ip = client_addr.ip();
        let slot = self.throttle().slot(ip, Instant::now());
        if slot > Instant::now() {
            tracing::info!(%client_addr, wait = ?slot - Instant::now(), "login throttled after failed attempts from this address");
            tokio::time::sleep_until(slot.into()).await;
        }
        let permit = self
            .checks
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| mqtt5::MqttError::AuthenticationFailed)?;
        let passwords = self.passwords.clone();
        let dummy = self.dummy_hash.clone();
        let (user_owned, password) = (
            user.to_owned(),
            String::from_utf8_lossy(password).into_owned(),
        );
        let accepted = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            if passwords.has_user(&user_owned) {
                passwords.verify_user_password_blocking(&user_owned, &password)
            } else {
                // The same work as a known user's check, and a refusal.
                let _ = PasswordAuthProvider::verify_password(&password, &dummy);
                false
            }
        })
        .await
        .unwrap_or(false);
        if accepted {
            self.throttle().succeeded(ip);
            Ok(AuthResult::success_with_user(user.to_owned()))
        } else {
            self.throttle().failed(ip, Instant::now());
            Ok(AuthResult::fail(ReasonCode::BadUsernameOrPassword))
        }
    }

    /// Whether `user` and `password` are one of the password file's users, checked as an
    /// MQTT login is (throttled per address of `peer`, on the blocking pool): the web
    /// surfaces accept the broker's users (see [`crate::web::auth`]).
    pub(crate) async fn password_accepted(
        &self,
        user: &str,
        password: &[u8],
        peer: SocketAddr,
    ) -> bool {
        matches!(
            self.check_password(user, password, peer).await,
            Ok(result) if result.authenticated
        )
    }

    fn may_publish(&self, client_id: &str, user: Option<&str>, topic: &str) -> bool {
        !self.confine
            || Self::is_store(user)
            || topic == REQUEST_TOPIC
            || owns_topic(client_id, topic)
            || self.rules.allows_publish(client_id, user, topic)
    }

    fn may_subscribe(&self, client_id: &str, user: Option<&str>, filter: &str) -> bool {
        !self.confine
            || Self::is_store(user)
            || owns_topic(client_id, filter)
            || self.rules.allows_subscribe(client_id, user, filter)
    }
}

impl AuthProvider for AccessControl {
    fn authenticate<'a>(
        &'a self,
        connect: &'a ConnectPacket,
        client_addr: SocketAddr,
    ) -> Pin<Box<dyn Future<Output = mqtt5::Result<AuthResult>> + Send + 'a>> {
        Box::pin(async move {
            if self.confine && connect.client_id.contains(['/', '+', '#']) {
                // Such an id could reach into another client's topic tree.
                tracing::warn!(client_id = %connect.client_id, %client_addr, "refused: client id with '/', '+' or '#'");
                return Ok(AuthResult::fail(ReasonCode::ClientIdentifierNotValid));
            }
            if self.confine
                && connect.username.is_none()
                && self.tokens.is_some()
                && self.passwords.user_count() <= 1
            {
                // Only SAT authentication is configured and none was attempted.
                tracing::warn!(client_id = %connect.client_id, %client_addr, "refused: no credentials");
                return Ok(AuthResult::fail(ReasonCode::NotAuthorized));
            }
            let result = match (&connect.username, &connect.password) {
                (Some(user), Some(password)) => {
                    self.check_password(user, password, client_addr).await?
                }
                // Anonymous, or a user name alone: no hash to check (the provider decides by
                // whether anonymous clients are allowed).
                _ => self.passwords.authenticate(connect, client_addr).await?,
            };
            if !result.authenticated {
                tracing::warn!(client_id = %connect.client_id, user = ?connect.username, %client_addr,
                    reason = ?result.reason_code, "refused: bad user name or password");
            }
            Ok(result)
        })
    }

    fn authorize_publish<'a>(
        &'a self,
        client_id: &str,
        user_id: Option<&'a str>,
        topic: &'a str,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        let allowed = self.may_publish(client_id, user_id, topic);
        if !allowed {
            tracing::warn!(client_id, user = ?user_id, topic, "refused PUBLISH outside the client's topics");
        }
        Box::pin(async move { allowed })
    }

    fn authorize_subscribe<'a>(
        &'a self,
        client_id: &str,
        user_id: Option<&'a str>,
        topic_filter: &'a str,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        let allowed = self.may_subscribe(client_id, user_id, topic_filter);
        if !allowed {
            tracing::warn!(client_id, user = ?user_id, topic_filter, "refused SUBSCRIBE outside the client's topics");
        }
        Box::pin(async move { allowed })
    }

    fn supports_enhanced_auth(&self) -> bool {
        true
    }

    fn authenticate_enhanced<'a>(
        &'a self,
        auth_method: &'a str,
        auth_data: Option<&'a [u8]>,
        client_id: &'a str,
    ) -> Pin<Box<dyn Future<Output = mqtt5::Result<EnhancedAuthResult>> + Send + 'a>> {
        Box::pin(async move {
            let Some(tokens) = self
                .tokens
                .as_ref()
                .filter(|_| auth_method == K8S_SAT_METHOD)
            else {
                tracing::warn!(
                    client_id,
                    auth_method,
                    "refused: unsupported authentication method"
                );
                return Ok(EnhancedAuthResult::fail(
                    auth_method,
                    ReasonCode::BadAuthenticationMethod,
                ));
            };
            if self.confine && client_id.contains(['/', '+', '#']) {
                return Ok(EnhancedAuthResult::fail(
                    auth_method,
                    ReasonCode::ClientIdentifierNotValid,
                ));
            }
            match auth_data.and_then(|t| tokens.user_of(t)) {
                Some(user) => Ok(EnhancedAuthResult::success_with_user(auth_method, user)),
                None => {
                    tracing::warn!(
                        client_id,
                        present = auth_data.is_some(),
                        "refused: K8S-SAT token missing or not accepted"
                    );
                    Ok(EnhancedAuthResult::fail_with_reason(
                        auth_method,
                        ReasonCode::NotAuthorized,
                        "token not accepted",
                    ))
                }
            }
        })
    }

    fn reauthenticate<'a>(
        &'a self,
        auth_method: &'a str,
        auth_data: Option<&'a [u8]>,
        client_id: &'a str,
        _user_id: Option<&'a str>,
    ) -> Pin<Box<dyn Future<Output = mqtt5::Result<EnhancedAuthResult>> + Send + 'a>> {
        self.authenticate_enhanced(auth_method, auth_data, client_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_after_the_free_failures_up_to_its_cap() {
        assert_eq!(delay_after(FREE_FAILURES), FIRST_DELAY);
        assert_eq!(delay_after(FREE_FAILURES + 1), FIRST_DELAY * 2);
        assert_eq!(delay_after(FREE_FAILURES + 3), FIRST_DELAY * 8);
        assert_eq!(delay_after(u32::MAX), MAX_DELAY);
        let mut t = Throttle::default();
        let (ip, t0) = (IpAddr::from([10, 0, 0, 1]), Instant::now());
        for _ in 0..FREE_FAILURES - 1 {
            t.failed(ip, t0);
            assert_eq!(t.slot(ip, t0), t0);
        }
        t.failed(ip, t0);
        // Two parallel attempts from the throttled address get two slots, a delay apart.
        let first = t.slot(ip, t0);
        let second = t.slot(ip, t0);
        assert!(first >= t0 + FIRST_DELAY, "{:?}", first - t0);
        assert!(second >= first + FIRST_DELAY);
        // Another address is not slowed; a success clears the address.
        assert_eq!(t.slot(IpAddr::from([10, 0, 0, 2]), t0), t0);
        t.succeeded(ip);
        assert_eq!(t.slot(ip, t0), t0);
        // Failures are forgotten after a quiet while.
        for _ in 0..10 {
            t.failed(ip, t0);
        }
        let later = t0 + FORGET_AFTER + Duration::from_secs(1);
        assert_eq!(t.slot(ip, later), later);
    }

    #[test]
    fn ownership_of_topics() {
        assert!(owns_topic("a", "clients/a/x"));
        assert!(!owns_topic("a", "clients/a"));
        assert!(!owns_topic("a", "clients/ab/x"));
        assert!(!owns_topic("a/b", "clients/a/b/x"));
        assert!(!owns_topic(
            "a",
            &format!("{NOTIFY_PREFIX}62/command/notify/+")
        ));
        assert!(owns_topic(
            "a",
            &format!("{NOTIFY_PREFIX}61/command/notify/+")
        ));
        assert!(!owns_topic(
            "a",
            &format!("{NOTIFY_PREFIX}+/command/notify/+")
        ));
    }

    /// The example that was in the documentation (the item is private to the crate now).
    #[test]
    fn own_topics_only() {
        use super::owns_topic;

        assert!(owns_topic(
            "c1",
            "clients/c1/services/statestore/_any_/command/invoke/response"
        ));
        assert!(owns_topic(
            "c1",
            "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/6331/command/notify/+"
        ));
        assert!(!owns_topic("c1", "clients/c2/x"));
        assert!(!owns_topic("c1", "clients/+/x"));
        assert!(!owns_topic("c1", "clients/#"));
    }
}
