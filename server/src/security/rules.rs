//! The rule file: permissions beyond a client's own topics, per user name or client id prefix.

use std::path::Path;

use mqtt5::topic_matches_filter;

use crate::error::ServerError;

/// Who a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// An authenticated user name (`*`: every authenticated user).
    User(String),
    /// Every client whose id starts with this prefix.
    ClientPrefix(String),
}

/// What a rule allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// PUBLISH to matching topics.
    Publish,
    /// SUBSCRIBE to filters within the rule's filter.
    Subscribe,
    /// Both.
    Both,
}

/// One line of the rule file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Who.
    pub subject: Subject,
    /// What.
    pub access: Access,
    /// Where: an MQTT topic filter (`+` and `#` allowed).
    pub filter: String,
}

/// The rules of a rule file.
///
/// Format: one rule per line, `user:NAME|client:PREFIX publish|subscribe|both FILTER`;
/// blank lines and `#` comments are ignored. A SUBSCRIBE is allowed when the requested filter
/// lies within a rule's filter (`sensors/+/temp` within `sensors/#`).
///
/// ```
/// use mqstate_server::security::RuleSet;
///
/// let r = RuleSet::parse("user:dash subscribe clients/#\nclient:sensor- publish sensors/#\n").unwrap();
/// assert!(r.allows_subscribe("any", Some("dash"), "clients/x/y"));
/// assert!(!r.allows_subscribe("any", Some("eve"), "clients/x/y"));
/// assert!(r.allows_publish("sensor-7", None, "sensors/7/t"));
/// assert!(!r.allows_publish("sensor-7", None, "other"));
/// assert!(RuleSet::parse("user:a read x").is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSet {
    rules: Vec<Rule>,
}

impl RuleSet {
    /// Reads a rule file.
    pub fn load(path: &Path) -> Result<RuleSet, ServerError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ServerError::io(format!("reading the rule file {}", path.display()), e))?;
        RuleSet::parse(&text)
            .map_err(|e| ServerError::Config(format!("rule file {}: {e}", path.display())))
    }

    /// Parses a rule file's text.
    pub fn parse(text: &str) -> Result<RuleSet, String> {
        let mut rules = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| format!("line {}: {why} (in {line:?})", n + 1);
            let mut parts = line.split_whitespace();
            let (Some(who), Some(access), Some(filter), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad("expected `user:NAME|client:PREFIX ACCESS FILTER`"));
            };
            let subject = match who.split_once(':') {
                Some(("user", name)) if !name.is_empty() => Subject::User(name.to_owned()),
                Some(("client", prefix)) if !prefix.is_empty() => {
                    Subject::ClientPrefix(prefix.to_owned())
                }
                _ => return Err(bad("the subject must be user:NAME or client:PREFIX")),
            };
            let access = match access {
                "publish" => Access::Publish,
                "subscribe" => Access::Subscribe,
                "both" => Access::Both,
                _ => return Err(bad("the access must be publish, subscribe or both")),
            };
            if !mqtt5::is_valid_topic_filter(filter) {
                return Err(bad("not a valid MQTT topic filter"));
            }
            rules.push(Rule {
                subject,
                access,
                filter: filter.to_owned(),
            });
        }
        Ok(RuleSet { rules })
    }

    fn applying<'a>(
        &'a self,
        client_id: &'a str,
        user: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |r| match &r.subject {
            Subject::User(name) => user.is_some_and(|u| name == "*" || name == u),
            Subject::ClientPrefix(prefix) => client_id.starts_with(prefix.as_str()),
        })
    }

    /// Whether a rule lets this client publish to `topic`.
    pub fn allows_publish(&self, client_id: &str, user: Option<&str>, topic: &str) -> bool {
        self.applying(client_id, user)
            .any(|r| r.access != Access::Subscribe && topic_matches_filter(topic, &r.filter))
    }

    /// Whether a rule lets this client subscribe to `filter`.
    pub fn allows_subscribe(&self, client_id: &str, user: Option<&str>, filter: &str) -> bool {
        // The requested filter, read as a topic, matches the rule's filter exactly when every
        // topic it can match is matched by the rule's (its `+`/`#` levels fall on the rule's
        // wildcards).
        self.applying(client_id, user)
            .any(|r| r.access != Access::Publish && topic_matches_filter(filter, &r.filter))
    }
}
