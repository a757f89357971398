//! The store's unit tests: SET, NX and NEX, VDEL, the quota, expiry, fencing and the
//! journal.

use super::*;

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

fn v(ms: u64, counter: u64) -> Hlc {
    Hlc::new(ms, counter, "StateStore")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn set_get_del() {
    let now = Instant::now();
    let mut s = Store::new(None);
    assert_eq!(
        s.set(SetArgs::new(b("k"), b("v")), v(1, 0), now),
        Ok(SetOutcome::Applied)
    );
    let e = s.get(b"k").unwrap();
    assert_eq!((&e.value[..], &e.version), (&b"v"[..], &v(1, 0)));
    assert_eq!(s.del(b"k", None), Ok(1));
    assert_eq!(s.del(b"k", None), Ok(0));
    assert!(s.get(b"k").is_none());
    assert!(s.is_empty());
}

#[test]
fn nx_and_nex() {
    let now = Instant::now();
    let mut s = Store::new(None);
    let nx = |val| SetArgs::new(b("k"), val).condition(SetCondition::NotExists);
    let nex = |val| SetArgs::new(b("k"), val).condition(SetCondition::NotExistsOrEqual);
    assert_eq!(s.set(nx(b("a")), v(1, 0), now), Ok(SetOutcome::Applied));
    assert_eq!(s.set(nx(b("a")), v(2, 0), now), Ok(SetOutcome::NotApplied));
    assert_eq!(s.get(b"k").unwrap().version, v(1, 0));
    assert_eq!(s.set(nex(b("b")), v(3, 0), now), Ok(SetOutcome::NotApplied));
    assert_eq!(s.set(nex(b("a")), v(4, 0), now), Ok(SetOutcome::Applied));
    assert_eq!(s.get(b"k").unwrap().version, v(4, 0));
    s.del(b"k", None).unwrap();
    assert_eq!(s.set(nex(b("c")), v(5, 0), now), Ok(SetOutcome::Applied));
}

#[test]
fn vdel_outcomes() {
    let now = Instant::now();
    let mut s = Store::new(None);
    s.set(SetArgs::new(b("k"), b("v")), v(1, 0), now).unwrap();
    assert_eq!(s.vdel(b"k", b"x", None), Ok(VdelOutcome::Mismatch));
    assert_eq!(s.vdel(b"k", b"v", None), Ok(VdelOutcome::Deleted));
    assert_eq!(s.vdel(b"k", b"v", None), Ok(VdelOutcome::Missing));
}

#[test]
fn quota_counts_new_keys_only() {
    let now = Instant::now();
    let mut s = Store::new(Some(2));
    s.set(SetArgs::new(b("a"), b("1")), v(1, 0), now).unwrap();
    s.set(SetArgs::new(b("b"), b("1")), v(1, 1), now).unwrap();
    assert_eq!(
        s.set(SetArgs::new(b("c"), b("1")), v(1, 2), now),
        Err(StoreError::QuotaExceeded)
    );
    // Overwriting an existing key is fine at the quota.
    assert_eq!(
        s.set(SetArgs::new(b("a"), b("2")), v(1, 3), now),
        Ok(SetOutcome::Applied)
    );
    s.del(b"b", None).unwrap();
    assert_eq!(
        s.set(SetArgs::new(b("c"), b("1")), v(1, 4), now),
        Ok(SetOutcome::Applied)
    );
}

#[test]
fn expiry_is_exact_and_cleared_by_a_plain_set() {
    let t0 = Instant::now();
    let mut s = Store::new(None);
    let px = |val, d| SetArgs::new(b("k"), val).expiry(Some(ms(d)));
    s.set(px(b("a"), 50), v(1, 0), t0).unwrap();
    assert_eq!(s.next_deadline(), Some(t0 + ms(50)));
    assert!(s.expire_due(t0 + ms(49)).is_empty());
    // Renewed at 40 ms for 50 ms more: the old deadline is gone.
    s.set(px(b("a"), 50), v(2, 0), t0 + ms(40)).unwrap();
    assert_eq!(s.next_deadline(), Some(t0 + ms(90)));
    assert!(s.expire_due(t0 + ms(60)).is_empty());
    let expired = s.expire_due(t0 + ms(90));
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].0, b("k"));
    assert_eq!(expired[0].1.version, v(2, 0));
    assert!(s.get(b"k").is_none());
    assert_eq!(s.next_deadline(), None);

    // A SET without PX removes the deadline.
    s.set(px(b("a"), 50), v(3, 0), t0).unwrap();
    s.set(SetArgs::new(b("k"), b("b")), v(4, 0), t0).unwrap();
    assert_eq!(s.next_deadline(), None);
    assert!(s.expire_due(t0 + ms(1000)).is_empty());
    assert!(s.get(b"k").is_some());
}

#[test]
fn deleting_a_key_removes_its_deadline() {
    let t0 = Instant::now();
    let mut s = Store::new(None);
    s.set(
        SetArgs::new(b("k"), b("v")).expiry(Some(ms(10))),
        v(1, 0),
        t0,
    )
    .unwrap();
    s.del(b"k", None).unwrap();
    assert_eq!(s.next_deadline(), None);
    s.set(
        SetArgs::new(b("k"), b("v")).expiry(Some(ms(10))),
        v(1, 0),
        t0,
    )
    .unwrap();
    s.vdel(b"k", b"v", None).unwrap();
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn many_deadlines_expire_in_order() {
    let t0 = Instant::now();
    let mut s = Store::new(None);
    for (i, d) in [30u64, 10, 20].into_iter().enumerate() {
        let key = Bytes::from(format!("k{i}"));
        s.set(SetArgs::new(key, b("v")).expiry(Some(ms(d))), v(1, 0), t0)
            .unwrap();
    }
    let keys: Vec<Bytes> = s
        .expire_due(t0 + ms(25))
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, vec![b("k1"), b("k2")]);
    assert_eq!(s.next_deadline(), Some(t0 + ms(30)));
}

#[test]
fn fencing_algorithm() {
    let now = Instant::now();
    let mut s = Store::new(None);
    let t1 = Hlc::new(100, 0, "StateStore");
    let t2 = Hlc::new(200, 0, "StateStore");
    let set = |token: Option<&Hlc>| SetArgs::new(b("p"), b("v")).fencing_token(token.cloned());
    // No token on the key, a token on the SET: stored.
    s.set(set(Some(&t1)), v(1, 0), now).unwrap();
    assert_eq!(s.get(b"p").unwrap().fencing_token, Some(t1.clone()));
    // Fenced: no token, a lower token are refused; equal and newer accepted.
    assert_eq!(
        s.set(set(None), v(2, 0), now),
        Err(StoreError::FencingTokenRequired)
    );
    assert_eq!(
        s.set(set(Some(&Hlc::new(99, 5, "x"))), v(2, 0), now),
        Err(StoreError::FencingTokenLowerVersion)
    );
    assert_eq!(s.set(set(Some(&t1)), v(3, 0), now), Ok(SetOutcome::Applied));
    assert_eq!(s.set(set(Some(&t2)), v(4, 0), now), Ok(SetOutcome::Applied));
    assert_eq!(s.get(b"p").unwrap().fencing_token, Some(t2.clone()));
    assert_eq!(
        s.set(set(Some(&t1)), v(5, 0), now),
        Err(StoreError::FencingTokenLowerVersion)
    );
    // DEL and VDEL follow the same checks; the token goes with the key.
    assert_eq!(s.del(b"p", None), Err(StoreError::FencingTokenRequired));
    assert_eq!(
        s.vdel(b"p", b"v", Some(&t1)),
        Err(StoreError::FencingTokenLowerVersion)
    );
    assert_eq!(s.vdel(b"p", b"v", Some(&t2)), Ok(VdelOutcome::Deleted));
    assert_eq!(s.set(set(None), v(6, 0), now), Ok(SetOutcome::Applied));
    assert_eq!(s.get(b"p").unwrap().fencing_token, None);
    // An unfenced key accepts DEL with or without a token.
    assert_eq!(s.del(b"p", Some(&t1)), Ok(1));
}

#[test]
fn the_journal_records_changes_and_undo_restores_them() {
    let t0 = Instant::now();
    let mut s = Store::new(None);
    s.set(SetArgs::new(b("a"), b("1")), v(1, 0), t0).unwrap();
    assert!(s.journal().is_empty(), "journaling is off by default");
    s.enable_journal();
    s.set(SetArgs::new(b("a"), b("2")).persist(true), v(2, 0), t0)
        .unwrap();
    s.set(
        SetArgs::new(b("n"), b("x")).expiry(Some(ms(10))),
        v(3, 0),
        t0,
    )
    .unwrap();
    s.del(b"a", None).unwrap();
    s.set(SetArgs::new(b("a"), b("3")), v(4, 0), t0).unwrap();
    assert_eq!(s.expire_due(t0 + ms(10)).len(), 1);
    // A condition that fails and a refused write change nothing and record nothing.
    s.set(
        SetArgs::new(b("a"), b("4")).condition(SetCondition::NotExists),
        v(5, 0),
        t0,
    )
    .unwrap();
    assert_eq!(s.journal().len(), 5);
    let changes = s.take_journal();
    assert!(s.journal_is_empty());
    assert_eq!(changes[0].1.as_ref().unwrap().version, v(1, 0));
    s.undo(changes);
    assert!(s.journal_is_empty(), "undo is not journaled");
    let a = s.get(b"a").unwrap();
    assert_eq!(
        (&a.value, &a.version, a.persist),
        (&b("1"), &v(1, 0), false)
    );
    assert!(s.get(b"n").is_none());
    assert_eq!(s.next_deadline(), None);
    assert_eq!(s.len(), 1);
}

#[test]
fn fence_is_checked_before_the_condition() {
    let now = Instant::now();
    let mut s = Store::new(None);
    let t1 = Hlc::new(100, 0, "StateStore");
    s.set(
        SetArgs::new(b("p"), b("v")).fencing_token(Some(t1.clone())),
        v(1, 0),
        now,
    )
    .unwrap();
    assert_eq!(
        s.set(
            SetArgs::new(b("p"), b("v")).condition(SetCondition::NotExists),
            v(2, 0),
            now
        ),
        Err(StoreError::FencingTokenRequired)
    );
    // A condition that fails does not move the token.
    let newer = Hlc::new(500, 0, "StateStore");
    assert_eq!(
        s.set(
            SetArgs::new(b("p"), b("v"))
                .condition(SetCondition::NotExists)
                .fencing_token(Some(newer)),
            v(3, 0),
            now
        ),
        Ok(SetOutcome::NotApplied)
    );
    assert_eq!(s.get(b"p").unwrap().fencing_token, Some(t1));
}
