//! Reading the shared test vectors (`tests/vectors/*.json`, read by the C, Python and Node
//! suites too).

use serde_json::Value;

/// The vectors file `name` of `tests/vectors/`.
pub fn load(name: &str) -> Value {
    let path = format!("{}/../tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// The cases of a section, which must have some.
pub fn cases<'a>(doc: &'a Value, section: &str) -> &'a [Value] {
    let cases = doc[section]
        .as_array()
        .unwrap_or_else(|| panic!("missing section {section}"));
    assert!(!cases.is_empty(), "empty section {section}");
    cases
}

pub fn str_of<'a>(case: &'a Value, field: &str) -> &'a str {
    case[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} must be a string: {case}"))
}
