//! Fixture of scripts/check-docs --self-test (never compiled): this doc comment quotes a
//! file that exists, `server/src/statestore/store/mod.rs`, and one that does not, `server/src/no_such.rs`.

// A plain comment is not a doc comment and is not checked: server/src/not_checked.rs
/// A doc comment on an item, with a broken anchor: docs/protocol.md#not-a-section.
pub fn fixture() {}
