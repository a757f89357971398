//! A request to the HTTPS REST API's router, in process ([`rest_request`]).

use super::*;

/// The response of [`rest_request`].
#[derive(Debug)]
pub struct RestResponse {
    /// The request's method and URI.
    pub request: String,
    /// Which token the input asked for (its first byte modulo 8).
    pub token: u8,
    /// The status.
    pub status: u16,
    /// `iothub-errorcode`, if set.
    pub error_code: Option<String>,
    /// `Content-Type`, if set.
    pub content_type: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// A request to the HTTPS REST API's router, in process. The input: a byte choosing the
/// `Authorization` header (modulo 8: the request's own; a token of `iothubowner`,
/// `registryRead`, `service`; `d1`'s device token; a `device` policy token for `d1`; an
/// expired `iothubowner` token; an `iothubowner` token for another host), then
/// `METHOD URI\n`, header lines `Name: value\n`, an empty line and the body. `Ok(None)`: the
/// `http` crate refuses the method, URI or a header (no server would route it). `Err`: the
/// hub or its runtime could not be made.
pub fn rest_request(data: &[u8]) -> Result<Option<RestResponse>, String> {
    let selector = data.first().copied().unwrap_or(0) % 8;
    let rest = data.get(1..).unwrap_or_default();
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (
            rest.get(..at).unwrap_or_default(),
            rest.get(at + 2..).unwrap_or_default(),
        ),
        None => (rest, &[][..]),
    };
    let mut lines = head.split(|b| *b == b'\n');
    let request_line = lines.next().unwrap_or_default();
    let (method, uri) = match request_line.iter().position(|b| *b == b' ') {
        Some(at) => (
            request_line.get(..at).unwrap_or_default(),
            request_line.get(at + 1..).unwrap_or_default(),
        ),
        None => (request_line, &b"/"[..]),
    };
    let Ok(method) = axum::http::Method::from_bytes(method) else {
        return Ok(None);
    };
    let Ok(uri) = axum::http::Uri::try_from(uri) else {
        return Ok(None);
    };
    let mut builder = axum::http::Request::builder()
        .method(method.clone())
        .uri(uri.clone());
    for line in lines {
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(at) => (
                line.get(..at).unwrap_or_default(),
                line.get(at + 1..).unwrap_or_default().trim_ascii(),
            ),
            None => (line, &[][..]),
        };
        let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.trim_ascii()),
            axum::http::HeaderValue::from_bytes(value),
        ) else {
            return Ok(None);
        };
        builder = builder.header(name, value);
    }
    let hub = hub(true)?;
    let hour = Duration::from_secs(3600);
    let later = SystemTime::now() + hour;
    let service = |name: &str, host: &str, expiry: SystemTime| {
        hub.policy(name)
            .and_then(|p| policies::service_token(host, &p, expiry))
    };
    let token = match selector {
        1 => Some(service("iothubowner", HOSTNAME, later)),
        2 => Some(service("registryRead", HOSTNAME, later)),
        3 => Some(service("service", HOSTNAME, later)),
        4 => Some(hub.device_token(DEVICE_ID, hour)),
        5 => Some(hub.policy("device").and_then(|p| {
            let resource = sas::device_resource(HOSTNAME, DEVICE_ID);
            sas::generate(&resource, &p.primary_key, later).map(|t| format!("{t}&skn=device"))
        })),
        6 => Some(service(
            "iothubowner",
            HOSTNAME,
            SystemTime::now().checked_sub(hour).unwrap_or(UNIX_EPOCH),
        )),
        7 => Some(service("iothubowner", "other.example", later)),
        _ => None,
    };
    let mut request = builder
        .body(axum::body::Body::from(body.to_vec()))
        .map_err(|e| format!("request: {e}"))?;
    if let Some(token) = token {
        let token = token.map_err(|e| format!("token: {e}"))?;
        let value = axum::http::HeaderValue::from_str(&token).map_err(|e| e.to_string())?;
        request
            .headers_mut()
            .insert(axum::http::header::AUTHORIZATION, value);
    }
    let router = crate::iothub::https::service::router(hub);
    let response = runtime()?.block_on(async move {
        use hyper::service::Service as _;
        let service = hyper_util::service::TowerToHyperService::new(router);
        let response = match service.call(request).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let (parts, body) = response.into_parts();
        let body = http_body_util::BodyExt::collect(body)
            .await
            .map_err(|e| format!("response body: {e}"))?
            .to_bytes();
        Ok::<_, String>((parts, body))
    })?;
    let (parts, body) = response;
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    Ok(Some(RestResponse {
        request: format!("{method} {uri}"),
        token: selector,
        status: parts.status.as_u16(),
        error_code: header("iothub-errorcode"),
        content_type: header("content-type"),
        body: body.to_vec(),
    }))
}
