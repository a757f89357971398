//! [`AccessControl`]: the embedded broker's authentication and authorization.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use mqtt5::broker::PasswordAuthProvider;
use mqtt5::broker::auth::{AuthProvider, AuthResult, EnhancedAuthResult};
use mqtt5::packet::connect::ConnectPacket;
use mqtt5::protocol::v5::reason_codes::ReasonCode;

use super::{RuleSet, SecurityConfig, TokenSet};
use crate::error::ServerError;

/// The enhanced authentication method of Kubernetes service account tokens.
pub const K8S_SAT_METHOD: &str = "K8S-SAT";

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
///
/// ```
/// use mqstate_server::security::owns_topic;
///
/// assert!(owns_topic("c1", "clients/c1/services/statestore/_any_/command/invoke/response"));
/// assert!(owns_topic("c1", "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/6331/command/notify/+"));
/// assert!(!owns_topic("c1", "clients/c2/x"));
/// assert!(!owns_topic("c1", "clients/+/x"));
/// assert!(!owns_topic("c1", "clients/#"));
/// ```
pub fn owns_topic(client_id: &str, topic: &str) -> bool {
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

/// Authentication (password file, K8S-SAT tokens, the store's own credentials) and
/// authorization (own topics plus the rule file) for the embedded broker.
pub struct AccessControl {
    passwords: PasswordAuthProvider,
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
    ) -> Result<AccessControl, ServerError> {
        let passwords = match &config.password_file {
            Some(path) => {
                let p = PasswordAuthProvider::from_file(path).await.map_err(|e| {
                    ServerError::Config(format!("password file {}: {e}", path.display()))
                })?;
                if p.has_user(STORE_USER) {
                    return Err(ServerError::Config(format!(
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
            .map_err(|e| ServerError::Config(format!("cannot hash the store's password: {e}")))?;
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
        Ok(AccessControl {
            passwords: passwords.with_anonymous(!config.authenticates()),
            tokens,
            rules,
            confine: config.authenticates(),
        })
    }

    fn is_store(user: Option<&str>) -> bool {
        user == Some(STORE_USER)
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
            let result = self.passwords.authenticate(connect, client_addr).await?;
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
}
