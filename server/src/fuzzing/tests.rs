//! The fuzz targets on stable: each check on random bytes and on mutations of valid
//! inputs ([`seeds`]), from a fixed seed, so that a failure repeats.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use super::checks;
use super::seeds::seeds;

/// One input: random bytes, or a seed with bytes replaced, inserted, removed, cut short,
/// extended, or a number in it changed.
fn input(rng: &mut fastrand::Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let random = |rng: &mut fastrand::Rng, max: usize| {
        let n = rng.usize(..max);
        (0..n).map(|_| rng.u8(..)).collect::<Vec<u8>>()
    };
    if seeds.is_empty() || rng.u8(..10) == 0 {
        return random(rng, 128);
    }
    let mut v = seeds[rng.usize(..seeds.len())].clone();
    let edits = 1 + rng.usize(..3);
    for _ in 0..edits {
        let len = v.len();
        match rng.u8(..6) {
            0 if len > 0 => v[rng.usize(..len)] = rng.u8(..),
            1 => v.insert(rng.usize(..=len), rng.u8(..)),
            2 if len > 0 => {
                let at = rng.usize(..len);
                let n = rng.usize(1..=(len - at).min(8));
                v.drain(at..at + n);
            }
            3 => v.truncate(rng.usize(..=len)),
            4 => v.extend(random(rng, 16)),
            _ => {
                // A run of digits (a length, an expiry, a count) replaced by another
                // number.
                if let Some(at) = v.iter().position(|b| b.is_ascii_digit()) {
                    let end = v[at..]
                        .iter()
                        .position(|b| !b.is_ascii_digit())
                        .map_or(len, |n| at + n);
                    let n = match rng.u8(..3) {
                        0 => rng.u64(..),
                        1 => u64::from(rng.u32(..)),
                        _ => rng.u64(..1000),
                    };
                    v.splice(at..end, n.to_string().into_bytes());
                } else if len > 0 {
                    v[rng.usize(..len)] ^= 1 << rng.u8(..8);
                }
            }
        }
    }
    v
}

fn run(target: &str, cases: usize, check: fn(&[u8])) {
    let seeds = seeds(target);
    assert!(!seeds.is_empty(), "{target}: no seeds");
    for seed in &seeds {
        check(seed);
    }
    let mut rng = fastrand::Rng::with_seed(0x6d71_7374);
    for _ in 0..cases {
        let data = input(&mut rng, &seeds);
        check(&data);
    }
}

#[test]
fn sas_token() {
    run("sas_token", 20_000, checks::sas_token);
}

#[test]
fn rest_request() {
    run("rest_request", 5_000, checks::rest_request);
}

#[test]
fn amqp_convert() {
    run("amqp_convert", 10_000, checks::amqp_convert);
}

#[test]
fn mqtt_connect() {
    run("mqtt_connect", 5_000, checks::mqtt_connect);
}

/// Writes [`seeds`] as the starting corpus of `server/fuzz`:
/// `cargo test -p mqstate-server --lib fuzzing::tests::write_seed_corpus -- --ignored`.
#[test]
#[ignore = "writes files; run it before a first `cargo fuzz run`"]
fn write_seed_corpus() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for target in ["sas_token", "rest_request", "amqp_convert", "mqtt_connect"] {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (n, seed) in seeds(target).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{n:02}")), seed).unwrap();
        }
    }
}
