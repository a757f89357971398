//! The glob patterns of `SCAN` (docs/protocol.md, "Listing keys: SCAN"): Redis's `MATCH`
//! language, over bytes.
//!
//! - `*` matches any run of bytes, the empty one included; `?` matches exactly one byte.
//! - `[abc]` matches one of the listed bytes, `[a-z]` one in the range (either order),
//!   `[^a-z]` one that is not; inside brackets `\` makes the next byte literal, so `[\]]`
//!   matches `]`.
//! - `\x` matches the byte `x` itself, so `\*` matches a star.
//! - Every other byte matches itself; there is no case folding and no UTF-8 decoding.
//!
//! Redis reads a pattern it cannot parse in some way of its own (an unclosed `[` runs to the
//! end, a trailing `\` matches a backslash); this matcher refuses such a pattern instead
//! ([`PatternError`]), so that a typo is an error rather than a silent empty listing. The
//! server answers it with `-ERR`.
//!
//! Matching takes time proportional to the key's length times the number of stars at worst
//! (one backtracking point), never exponential, whatever the pattern.
//!
//! ```
//! use mqstate::protocol::glob::Pattern;
//!
//! let pattern = Pattern::parse(b"line3/sensor-?/[tp]*").unwrap();
//! assert!(pattern.matches(b"line3/sensor-7/temperature"));
//! assert!(!pattern.matches(b"line3/sensor-12/temperature"));
//! assert_eq!(pattern.literal_prefix(), b"line3/sensor-");
//! assert!(Pattern::parse(b"unclosed[").is_err());
//! ```

use crate::protocol::errors::escape_excerpt;

/// One element of a parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A byte that matches itself.
    Literal(u8),
    /// `?`.
    One,
    /// `*` (consecutive stars are kept as one).
    Star,
    /// `[...]`: inclusive byte ranges (a single byte is a range of one), negated with `^`.
    Class {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
}

/// A parsed glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    tokens: Vec<Token>,
    /// The bytes every matching key starts with (the literals before the first wildcard).
    prefix: Vec<u8>,
}

/// Why a pattern was refused. Its text is what the server puts after `-ERR`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatternError {
    /// The pattern is empty (the official SDK refuses it before sending, and so does this
    /// library).
    #[error("the scan pattern is empty")]
    Empty,
    /// A `[` has no closing `]`.
    #[error("the scan pattern \"{pattern}\" has a '[' at byte {at} with no closing ']'")]
    UnclosedClass {
        /// The pattern, escaped and shortened for the message.
        pattern: String,
        /// Where the `[` is (0-based).
        at: usize,
    },
    /// The pattern ends in the middle of an escape (`\` as its last byte).
    #[error(
        "the scan pattern \"{pattern}\" ends with a lone '\\' (write '\\\\' to match a backslash)"
    )]
    TrailingEscape {
        /// The pattern, escaped and shortened for the message.
        pattern: String,
    },
}

impl Pattern {
    /// Parses a pattern; see the module documentation for the language.
    ///
    /// ```
    /// use mqstate::protocol::glob::{Pattern, PatternError};
    ///
    /// assert!(Pattern::parse(b"a\\*b").unwrap().matches(b"a*b"));
    /// assert!(matches!(Pattern::parse(b""), Err(PatternError::Empty)));
    /// assert!(matches!(Pattern::parse(b"ab\\"), Err(PatternError::TrailingEscape { .. })));
    /// ```
    pub fn parse(pattern: &[u8]) -> Result<Pattern, PatternError> {
        if pattern.is_empty() {
            return Err(PatternError::Empty);
        }
        let shown = || escape_excerpt(pattern, 64);
        let mut tokens = Vec::with_capacity(pattern.len());
        let mut i = 0;
        while let Some(&byte) = pattern.get(i) {
            match byte {
                b'*' => {
                    if tokens.last() != Some(&Token::Star) {
                        tokens.push(Token::Star);
                    }
                }
                b'?' => tokens.push(Token::One),
                b'\\' => {
                    i += 1;
                    let Some(&escaped) = pattern.get(i) else {
                        return Err(PatternError::TrailingEscape { pattern: shown() });
                    };
                    tokens.push(Token::Literal(escaped));
                }
                b'[' => {
                    let (class, end) =
                        parse_class(pattern, i).ok_or_else(|| PatternError::UnclosedClass {
                            pattern: shown(),
                            at: i,
                        })?;
                    tokens.push(class);
                    i = end;
                }
                other => tokens.push(Token::Literal(other)),
            }
            i += 1;
        }
        let prefix = tokens
            .iter()
            .map_while(|t| match t {
                Token::Literal(b) => Some(*b),
                _ => None,
            })
            .collect();
        Ok(Pattern { tokens, prefix })
    }

    /// The bytes that every key this pattern matches starts with: the literal bytes before
    /// its first wildcard (all of it when it has none). The server starts a scan there.
    pub fn literal_prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// Whether the pattern is all literal: it then matches exactly one key, its
    /// [`literal_prefix`](Pattern::literal_prefix).
    pub fn is_literal(&self) -> bool {
        self.prefix.len() == self.tokens.len()
    }

    /// Whether `key` matches the whole pattern.
    pub fn matches(&self, key: &[u8]) -> bool {
        // The classic wildcard match with one backtracking point: on a mismatch, the last
        // star takes one more byte. Linear in practice, O(key × pattern) at worst.
        let (mut t, mut k) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        loop {
            let token = self.tokens.get(t);
            let byte = key.get(k).copied();
            match (token, byte) {
                (Some(Token::Star), _) => {
                    star = Some((t, k));
                    t += 1;
                    continue;
                }
                (Some(token), Some(byte)) if token_matches(token, byte) => {
                    t += 1;
                    k += 1;
                    continue;
                }
                (None, None) => return true,
                _ => {}
            }
            match star {
                Some((star_t, star_k)) if star_k < key.len() => {
                    star = Some((star_t, star_k + 1));
                    t = star_t + 1;
                    k = star_k + 1;
                }
                _ => return false,
            }
        }
    }
}

fn token_matches(token: &Token, byte: u8) -> bool {
    match token {
        Token::Literal(b) => *b == byte,
        Token::One => true,
        Token::Star => false,
        Token::Class { negated, ranges } => {
            ranges.iter().any(|&(lo, hi)| lo <= byte && byte <= hi) != *negated
        }
    }
}

/// Parses the class that opens at `pattern[open]` (a `[`): the token and the index of its
/// closing `]`, or `None` when it is not closed. `[]` and `[^]` match nothing and everything
/// but nothing, as in Redis; `]` as a member is written `\]`.
fn parse_class(pattern: &[u8], open: usize) -> Option<(Token, usize)> {
    let mut i = open + 1;
    let negated = pattern.get(i) == Some(&b'^');
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    loop {
        let mut lo = *pattern.get(i)?;
        match lo {
            b']' => return Some((Token::Class { negated, ranges }, i)),
            b'\\' => {
                i += 1;
                lo = *pattern.get(i)?;
            }
            _ => {}
        }
        // `a-z` (a `-` before the closing bracket is a literal `-`).
        if pattern.get(i + 1) == Some(&b'-') && pattern.get(i + 2).is_some_and(|&b| b != b']') {
            let mut j = i + 2;
            let mut hi = *pattern.get(j)?;
            if hi == b'\\' {
                j += 1;
                hi = *pattern.get(j)?;
            }
            ranges.push((lo.min(hi), lo.max(hi)));
            i = j + 1;
        } else {
            ranges.push((lo, lo));
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, key: &str) -> bool {
        Pattern::parse(pattern.as_bytes())
            .unwrap()
            .matches(key.as_bytes())
    }

    #[test]
    fn stars_and_questions() {
        assert!(m("*", ""));
        assert!(m("*", "anything"));
        assert!(m("key*", "key"));
        assert!(m("key*", "key42"));
        assert!(!m("key*", "ke"));
        assert!(m("*42", "key42"));
        assert!(!m("*42", "key420"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(m("a*b*c", "abc"));
        assert!(!m("a*b*c", "acb"));
        assert!(m("a**b", "ab"));
        assert!(m("?", "x"));
        assert!(!m("?", ""));
        assert!(!m("?", "xy"));
        assert!(m("k??", "k12"));
        assert!(m("*?", "x"));
        assert!(!m("*?", ""));
    }

    #[test]
    fn classes() {
        assert!(m("[abc]", "b"));
        assert!(!m("[abc]", "d"));
        assert!(m("[a-c]x", "bx"));
        assert!(m("[c-a]x", "bx"), "a reversed range is the same range");
        assert!(!m("[^a-c]", "b"));
        assert!(m("[^a-c]", "d"));
        assert!(m("[a-]", "-"), "a '-' before ']' is literal");
        assert!(m("[\\]]", "]"));
        assert!(m("[\\^]", "^"));
        assert!(!m("[]", "a"), "an empty class matches nothing");
        assert!(m("[^]", "a"), "a negated empty class matches any byte");
        assert!(m("[*?]", "*"));
        assert!(!m("[*?]", "x"));
    }

    #[test]
    fn escapes_make_metacharacters_literal() {
        assert!(m("a\\*", "a*"));
        assert!(!m("a\\*", "ab"));
        assert!(m("\\?", "?"));
        assert!(!m("\\?", "x"));
        assert!(m("\\[x]", "[x]"));
        assert!(m("\\\\", "\\"));
    }

    #[test]
    fn bytes_not_text() {
        let p = Pattern::parse(b"\xff*\x00?").unwrap();
        assert!(p.matches(b"\xff\xfe\x00\x01"));
        assert!(!p.matches(b"\xfe\x00\x01"));
        assert!(!m("A*", "a"), "no case folding");
    }

    #[test]
    fn literal_prefix_stops_at_the_first_wildcard() {
        let prefix = |p: &[u8]| Pattern::parse(p).unwrap().literal_prefix().to_vec();
        assert_eq!(prefix(b"line3/*"), b"line3/");
        assert_eq!(prefix(b"a\\*b*"), b"a*b");
        assert_eq!(prefix(b"*x"), b"");
        assert_eq!(prefix(b"ab[c]"), b"ab");
        assert!(Pattern::parse(b"exact").unwrap().is_literal());
        assert!(Pattern::parse(b"a\\*").unwrap().is_literal());
        assert!(!Pattern::parse(b"a?").unwrap().is_literal());
    }

    #[test]
    fn malformed_patterns_are_refused_with_a_clear_text() {
        assert_eq!(Pattern::parse(b""), Err(PatternError::Empty));
        let err = Pattern::parse(b"ab[cd").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the scan pattern \"ab[cd\" has a '[' at byte 2 with no closing ']'"
        );
        assert!(Pattern::parse(b"[\\]").is_err());
        assert!(Pattern::parse(b"[a-\\").is_err());
        let err = Pattern::parse(b"x\\").unwrap_err();
        assert!(err.to_string().contains("lone '\\'"), "{err}");
    }

    #[test]
    fn matching_is_not_exponential() {
        let p = Pattern::parse(b"*a*a*a*a*a*a*a*a*b").unwrap();
        let key = vec![b'a'; 4096];
        assert!(!p.matches(&key));
    }
}
