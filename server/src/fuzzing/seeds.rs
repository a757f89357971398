//! Valid inputs of each target, for mutation: the stable run's seeds, and the corpus
//! `cargo fuzz` starts from (written by the ignored test `write_seed_corpus`).

use super::*;

pub(super) fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "sas_token" => sas_seeds(),
        "rest_request" => rest_seeds(),
        "amqp_convert" => amqp_seeds(),
        "mqtt_connect" => mqtt_seeds(),
        _ => Vec::new(),
    }
}

// The seeds do not depend on the time, so that the stable run's inputs are the same on
// every run.
fn sas_seeds() -> Vec<Vec<u8>> {
    let later = time::latest();
    let device = sas::device_resource(HOSTNAME, DEVICE_ID);
    let mut texts = vec![
        "SharedAccessSignature se=10&sr=h%2Fdevices%2Fd&sig=AAAA".to_owned(),
        "SharedAccessSignature sr=localhost%2Fdevices%2Fd1&sig=AAAA&se=9223372036854775808"
            .to_owned(),
        "SharedAccessSignature sr=localhost&sig=AAAA&se=253402300799&skn=iothubowner".to_owned(),
    ];
    for (resource, key, skn) in [
        (device.as_str(), DEVICE_KEY, ""),
        (HOSTNAME, OWNER_KEY, "&skn=iothubowner"),
        (device.as_str(), DEVICE_POLICY_KEY, "&skn=device"),
    ] {
        if let Ok(t) = sas::generate(resource, key, later) {
            texts.push(format!("{t}{skn}"));
        }
    }
    let mut out = Vec::new();
    for (n, text) in texts.iter().enumerate() {
        let mut seed = (n as u64 * 1_000_003).to_le_bytes().to_vec();
        seed.push(0);
        seed.extend_from_slice(text.as_bytes());
        out.push(seed);
    }
    // With flag 0x10, se 90000 is an hour from now.
    for flags in [
        0u8, 0x10, 0x15, 0x19, 0x18, 0x1c, 0x13, 0x03, 0x11, 0x12, 0x14, 0x16,
    ] {
        let mut seed = 90_000u64.to_le_bytes().to_vec();
        seed.push(flags);
        seed.extend_from_slice(b"localhost/devices/d1");
        out.push(seed);
    }
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.push(0);
    out.push(huge);
    out
}

fn rest_seeds() -> Vec<Vec<u8>> {
    let requests: [(u8, &str); 16] = [
        (1, "GET /devices?api-version=2021-04-12\n\n"),
        (2, "GET /devices/?top=5&api-version=2020-09-30\n\n"),
        (1, "GET /devices/d1?api-version=2021-04-12\n\n"),
        (
            1,
            "PUT /devices/d2?api-version=2021-04-12\ncontent-type: application/json\n\n{\"deviceId\":\"d2\",\"status\":\"enabled\",\"authentication\":{\"type\":\"sas\",\"symmetricKey\":{\"primaryKey\":\"\",\"secondaryKey\":\"\"}}}",
        ),
        (
            1,
            "PUT /devices/d1?api-version=2021-04-12\nif-match: *\n\n{\"deviceId\":\"d1\",\"status\":\"disabled\",\"statusReason\":\"x\",\"capabilities\":{\"iotEdge\":true}}",
        ),
        (
            1,
            "DELETE /devices/d1?api-version=2021-04-12\nif-match: *\n\n",
        ),
        (3, "DELETE /devices/d1/commands?api-version=2021-04-12\n\n"),
        (2, "GET /statistics/devices?api-version=2021-04-12\n\n"),
        (3, "GET /statistics/service?api-version=2021-04-12\n\n"),
        (
            4,
            "GET /devices/d1/messages/devicebound?api-version=2020-09-30\n\n",
        ),
        (
            5,
            "GET /devices/d1/messages/deviceBound?api-version=2021-04-12-preview\n\n",
        ),
        (
            4,
            "DELETE /devices/d1/messages/devicebound/00000000-0000-0000-0000-000000000000?api-version=2020-09-30&reject\n\n",
        ),
        (
            4,
            "POST /devices/d1/messages/devicebound/abc/abandon?api-version=2020-09-30\n\n",
        ),
        (
            4,
            "POST /devices/d1/messages/events?api-version=2020-09-30\niothub-messageid: m1\niothub-app-unit: celsius\ndt-subject: s\ncontent-type: text/plain\n\nhello",
        ),
        (
            4,
            "POST /devices/d1/messages/events?api-version=2020-09-30\ncontent-type: application/vnd.microsoft.iothub.json\n\n[{\"body\":\"aGk=\",\"properties\":{\"iothub-app-k\":\"v\",\"iothub-messageid\":\"m\"}},{\"body\":\"raw\",\"base64Encoded\":false}]",
        ),
        (
            0,
            "GET /devices/d1?api-version=2021-04-12\nauthorization: SharedAccessSignature sr=localhost&sig=AAAA&se=9223372036854775808&skn=iothubowner\n\n",
        ),
    ];
    requests
        .iter()
        .map(|(token, text)| {
            let mut seed = vec![*token];
            seed.extend_from_slice(text.as_bytes());
            seed
        })
        .collect()
}

fn amqp_seeds() -> Vec<Vec<u8>> {
    use fe2o3_amqp::types::messaging::message::__private::Serializable;
    use fe2o3_amqp::types::messaging::{
        AmqpValue, ApplicationProperties, Body, Data, Message, MessageAnnotations, MessageId,
        Properties,
    };
    use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};

    let properties = |expiry: Option<i64>| {
        let mut p = Properties::builder()
            .to("/devices/d1/messages/devicebound")
            .message_id(MessageId::Uuid([7u8; 16].into()))
            .correlation_id(MessageId::Ulong(9))
            .user_id(Binary::from(b"svc".to_vec()))
            .content_type(Symbol::from("application/json"))
            .content_encoding(Symbol::from("utf-8"))
            .build();
        p.absolute_expiry_time = expiry.map(Timestamp::from_milliseconds);
        p
    };
    let app = ApplicationProperties::builder()
        .insert("iothub-ack", SimpleValue::String("full".into()))
        .insert("n", SimpleValue::Int(7))
        .insert("z", SimpleValue::Null)
        .insert("b", SimpleValue::Binary(Binary::from(b"t".to_vec())))
        .build();
    let annotations = MessageAnnotations::builder()
        .insert(
            Symbol::from("iothub-interface-id"),
            Value::String("dtmi:x;1".into()),
        )
        .insert(Symbol::from("dt-subject"), Value::Symbol(Symbol::from("s")))
        .build();
    let data = Body::<Value>::Data(vec![Data(Binary::from(b"{\"a\":1}".to_vec()))].into());
    let messages: Vec<Message<Body<Value>>> = vec![
        Message::builder()
            .properties(properties(None))
            .application_properties(app.clone())
            .message_annotations(annotations.clone())
            .body(data.clone())
            .build(),
        Message::builder()
            .properties(properties(Some(i64::MAX)))
            .body(Body::Value(AmqpValue(Value::String("text".into()))))
            .build(),
        Message::builder()
            .properties(
                Properties::builder()
                    .to("/devices/d1/messages/events")
                    .message_id(String::from("m1"))
                    .build(),
            )
            .application_properties(app)
            .message_annotations(annotations)
            .body(Body::Value(AmqpValue(Value::Binary(Binary::from(
                b"bin".to_vec(),
            )))))
            .build(),
        Message::builder()
            .properties(properties(Some(-1)))
            .body(Body::Empty)
            .build(),
        // 2100-01-01: more than 2 days away.
        Message::builder()
            .properties(properties(Some(4_102_444_800_000)))
            .body(data.clone())
            .build(),
    ];
    messages
        .into_iter()
        .filter_map(|m| serde_amqp::to_vec(&Serializable(m)).ok())
        .collect()
}

fn mqtt_seeds() -> Vec<Vec<u8>> {
    use rumqttc::mqttbytes::QoS;
    use rumqttc::mqttbytes::v4::{
        Connect, Packet, PubAck, Publish, Subscribe, SubscribeFilter, Unsubscribe,
    };

    // `None` if a packet does not encode (a seed would then be garbage after it).
    let write = |packets: Vec<Packet>| {
        let mut buf = BytesMut::new();
        for p in packets {
            p.write(&mut buf, usize::MAX).ok()?;
        }
        Some(buf.to_vec())
    };
    let devicebound = format!("devices/{DEVICE_ID}/messages/devicebound/#");
    let mut subscribe = Subscribe::new_many([
        SubscribeFilter::new(devicebound.clone(), QoS::AtLeastOnce),
        SubscribeFilter::new("$iothub/twin/res/#".to_owned(), QoS::AtMostOnce),
        SubscribeFilter::new("$iothub/methods/POST/#".to_owned(), QoS::AtMostOnce),
    ]);
    subscribe.pkid = 1;
    let mut telemetry = Publish::new(
        format!("devices/{DEVICE_ID}/messages/events/%24.ct=application%2Fjson&k=v&n"),
        QoS::AtLeastOnce,
        "{\"t\":1}",
    );
    telemetry.pkid = 2;
    let mut twin = Publish::new("$iothub/twin/GET/?$rid=1", QoS::AtLeastOnce, "");
    twin.pkid = 3;
    let mut unsubscribe = Unsubscribe::new(devicebound);
    unsubscribe.pkid = 4;
    let session = vec![
        Packet::Subscribe(subscribe),
        Packet::PingReq,
        Packet::PubAck(PubAck::new(1)),
        Packet::Publish(telemetry),
        Packet::Publish(twin),
        Packet::Unsubscribe(unsubscribe),
        Packet::PingReq,
        Packet::Disconnect,
    ];
    let mut out = Vec::new();
    for flags in [1u8, 0x13, 0x25, 0x09, 0x31, 0x43] {
        if let Some(packets) = write(session.clone()) {
            let mut seed = vec![flags];
            seed.extend(packets);
            out.push(seed);
        }
    }
    let mut raw = Connect::new(DEVICE_ID);
    raw.set_login(
        format!("{HOSTNAME}/{DEVICE_ID}/?api-version=2021-04-12"),
        "SharedAccessSignature sr=localhost%2Fdevices%2Fd1&sig=AAAA&se=9223372036854775808",
    );
    if let Some(packets) = write(vec![Packet::Connect(raw), Packet::PingReq]) {
        let mut seed = vec![0u8];
        seed.extend(packets);
        out.push(seed);
    }
    out
}
