//! ns per encode and decode of a GET and of a SET with a 1 KiB value, as the client does
//! them (encode request, decode reply) and as the server does them (decode request,
//! encode reply).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, criterion_group, criterion_main};
use mqstate::protocol::resp3::{self, Reply, SetCondition};

fn codec(c: &mut Criterion) {
    let key = b"sensor/line-3/temperature";
    let value = vec![0x5a; 1024];
    let get_reply = {
        let mut buf = BytesMut::new();
        Reply::Bulk(Bytes::from(value.clone())).encode(&mut buf);
        buf.freeze()
    };
    let ok_reply = Bytes::from_static(b"+OK\r\n");
    let mut buf = BytesMut::with_capacity(4096);

    c.bench_function(
        "client GET round (encode request + decode 1 KiB reply)",
        |b| {
            b.iter(|| {
                buf.clear();
                resp3::encode_get(&mut buf, black_box(key));
                black_box(&buf);
                black_box(resp3::decode_get_reply(black_box(&get_reply)).unwrap())
            })
        },
    );
    c.bench_function(
        "client SET 1 KiB round (encode request + decode +OK)",
        |b| {
            b.iter(|| {
                buf.clear();
                resp3::encode_set(
                    &mut buf,
                    black_box(key),
                    black_box(&value),
                    SetCondition::Always,
                    None,
                );
                black_box(&buf);
                black_box(resp3::decode_set_reply(black_box(&ok_reply)).unwrap())
            })
        },
    );

    let get_request = {
        let mut b = BytesMut::new();
        resp3::encode_get(&mut b, key);
        b.freeze()
    };
    let set_request = {
        let mut b = BytesMut::new();
        resp3::encode_set(
            &mut b,
            key,
            &value,
            SetCondition::NotExistsOrEqual,
            Some(10_000),
        );
        b.freeze()
    };
    c.bench_function("encode GET", |b| {
        b.iter(|| {
            buf.clear();
            resp3::encode_get(&mut buf, black_box(key));
        })
    });
    c.bench_function("decode GET request", |b| {
        b.iter(|| black_box(resp3::decode_request(black_box(&get_request)).unwrap()))
    });
    c.bench_function("encode SET 1 KiB", |b| {
        b.iter(|| {
            buf.clear();
            resp3::encode_set(
                &mut buf,
                black_box(key),
                black_box(&value),
                SetCondition::NotExistsOrEqual,
                Some(10_000),
            );
        })
    });
    c.bench_function("decode SET 1 KiB request", |b| {
        b.iter(|| black_box(resp3::decode_request(black_box(&set_request)).unwrap()))
    });
    c.bench_function("decode GET reply 1 KiB", |b| {
        b.iter(|| black_box(resp3::decode_get_reply(black_box(&get_reply)).unwrap()))
    });
}

criterion_group!(benches, codec);
criterion_main!(benches);
