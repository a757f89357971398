//! Human durations on the command line: `10s`, `500ms`, `1m30s`, `2h`.

use std::time::Duration;

/// Parses a human duration (a number with a unit: ms, s, m, h, d; units may be combined).
/// Used as a clap value parser, so its error is shown after the flag's name.
///
/// ```text
/// 10s -> 10 s     1m30s -> 90 s     250ms -> 0.25 s     10 -> error (unit needed)
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e} (expected a duration such as 500ms, 10s, 1m30s)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("10").unwrap_err().contains("500ms"));
        assert!(parse_duration("soon").is_err());
    }
}
