//! The rule file: permissions beyond a client's own topics, per user name or client id prefix.

use std::path::Path;

use mqtt5::topic_matches_filter;

use super::error::SecurityError;

/// Who a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    /// An authenticated user name (`*`: every authenticated user).
    User(String),
    /// Every client whose id starts with this prefix.
    ClientPrefix(String),
}

/// What a rule allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// PUBLISH to matching topics.
    Publish,
    /// SUBSCRIBE to filters within the rule's filter.
    Subscribe,
    /// Both.
    Both,
}

/// One line of the rule file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RuleSet {
    rules: Vec<Rule>,
}

impl RuleSet {
    /// Reads a rule file.
    pub(crate) fn load(path: &Path) -> Result<RuleSet, SecurityError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            SecurityError::io(format!("reading the rule file {}", path.display()), e)
        })?;
        RuleSet::parse(&text)
            .map_err(|e| SecurityError::config_caused(format!("rule file {}", path.display()), e))
    }

    /// Parses a rule file's text.
    pub(crate) fn parse(text: &str) -> Result<RuleSet, String> {
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
    pub(crate) fn allows_publish(&self, client_id: &str, user: Option<&str>, topic: &str) -> bool {
        self.applying(client_id, user)
            .any(|r| r.access != Access::Subscribe && topic_matches_filter(topic, &r.filter))
    }

    /// Whether a rule lets this client subscribe to `filter`: only when every topic the
    /// filter can match is matched by the rule's filter ([`filter_within`]).
    pub(crate) fn allows_subscribe(
        &self,
        client_id: &str,
        user: Option<&str>,
        filter: &str,
    ) -> bool {
        self.applying(client_id, user)
            .any(|r| r.access != Access::Publish && filter_within(filter, &r.filter))
    }

    /// The rules that grant by client id prefix (`client:PREFIX`): any authenticated client
    /// may pick such an id, so `mqstate serve` warns about each at start (docs/security.md).
    pub(crate) fn client_prefix_rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules
            .iter()
            .filter(|r| matches!(r.subject, Subject::ClientPrefix(_)))
    }
}

/// Whether every topic that the subscription filter `inner` can match is also matched by
/// the filter `outer` (MQTT 5.0 section 4.7 wildcards): `sensors/+/temp` is within
/// `sensors/#` and within `sensors/+/+`, but `sensors/#` is not within `sensors/+` (it also
/// matches `sensors/a/b`), and `+/x` is not within `a/x`.
///
/// Reading `inner` as a topic and matching it against `outer` is not the same test: a `#`
/// level of `inner` would be taken as one level named `#` and pass a `+` of `outer`.
///
/// A `#` in the request is within only a `#` of the rule at the same level. (`#` within
/// `+/#` is refused although both match every topic that does not start with `$`: a rule
/// is never read as granting more than its levels say.)
pub(crate) fn filter_within(inner: &str, outer: &str) -> bool {
    // A filter that starts with a wildcard never matches a topic starting with `$` (4.7.2),
    // so only a literal first level of `inner` can reach such topics.
    if inner.starts_with('$') && (outer.starts_with('+') || outer.starts_with('#')) {
        return false;
    }
    let mut inner_levels = inner.split('/');
    let mut outer_levels = outer.split('/');
    loop {
        match (inner_levels.next(), outer_levels.next()) {
            // `#` in the rule takes this level and every one below, and the parent level.
            (_, Some("#")) => return true,
            // `#` in the request reaches levels the rule's non-`#` levels do not cover.
            (Some("#"), _) => return false,
            (Some(i), Some(o)) => {
                let level_within = o == "+" || (i != "+" && i == o);
                if !level_within {
                    return false;
                }
            }
            (None, None) => return true,
            // The request is longer than the rule (and the rule has no `#`).
            (Some(_), None) => return false,
            // The request is shorter: only a rule going on with `#` matches its topics
            // (`a/#` matches `a`); that case returned above.
            (None, Some(_)) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_is_within_a_rule_only_if_every_topic_it_matches_is() {
        for (inner, outer) in [
            ("sensors/a", "sensors/a"),
            ("sensors/a", "sensors/+"),
            ("sensors/+", "sensors/+"),
            ("sensors/+/temp", "sensors/#"),
            ("sensors/+/temp", "sensors/+/+"),
            ("sensors/#", "sensors/#"),
            ("sensors", "sensors/#"),
            ("sensors/a/#", "sensors/+/#"),
            ("#", "#"),
            ("+/+", "#"),
            ("a/b/c", "+/+/+"),
        ] {
            assert!(filter_within(inner, outer), "{inner} within {outer}");
        }
        for (inner, outer) in [
            ("sensors/#", "sensors/+"),
            ("sensors/+", "sensors/a"),
            ("sensors/+/+", "sensors/+"),
            ("sensors/a/b", "sensors/+"),
            ("sensors", "sensors/+"),
            ("#", "+"),
            ("+/x", "a/x"),
            ("sensors/#", "sensors/+/#"),
            ("$SYS/x", "#"),
            ("$SYS/x", "+/x"),
            ("clients/statestore/#", "clients/+/x"),
        ] {
            assert!(!filter_within(inner, outer), "{inner} not within {outer}");
        }
    }

    #[test]
    fn a_rule_on_a_single_level_does_not_grant_a_multi_level_subscription() {
        let r = RuleSet::parse("user:alice subscribe sensors/+\n").unwrap();
        assert!(r.allows_subscribe("c", Some("alice"), "sensors/t1"));
        assert!(r.allows_subscribe("c", Some("alice"), "sensors/+"));
        assert!(!r.allows_subscribe("c", Some("alice"), "sensors/#"));
        assert!(!r.allows_subscribe("c", Some("alice"), "sensors/t1/x"));
    }

    /// The example that was in the documentation (the item is private to the crate now).
    #[test]
    fn rules_parse_and_grant() {
        use super::RuleSet;

        let r = RuleSet::parse("user:dash subscribe clients/#\nclient:sensor- publish sensors/#\n")
            .unwrap();
        assert!(r.allows_subscribe("any", Some("dash"), "clients/x/y"));
        assert!(!r.allows_subscribe("any", Some("eve"), "clients/x/y"));
        assert!(r.allows_publish("sensor-7", None, "sensors/7/t"));
        assert!(!r.allows_publish("sensor-7", None, "other"));
        assert!(RuleSet::parse("user:a read x").is_err());
    }

    /// The example that was in the documentation (the item is private to the crate now).
    #[test]
    fn filters_within_filters() {
        use super::filter_within;

        assert!(filter_within("sensors/+/temp", "sensors/#"));
        assert!(!filter_within("sensors/#", "sensors/+"));
        assert!(
            filter_within("sensors", "sensors/#"),
            "`sensors/#` matches its parent level"
        );
    }
}
