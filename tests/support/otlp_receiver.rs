//! A local OTLP/HTTP trace receiver: it keeps each export request (headers and body) and decodes
//! the spans with a protobuf reader of its own, written from opentelemetry-proto's `.proto`
//! files rather than from the platform's encoder (the interop suite decodes with the official
//! Python package too).

use crate::local_server::{Handler, LocalServer, respond};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One export request as received.
#[derive(Debug, Clone)]
pub struct Export {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// A span as decoded from an export.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    pub name: String,
    /// OTLP's number: 1 internal, 2 server, 3 client.
    pub kind: u64,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    /// Values as JSON: strings, numbers, booleans, arrays.
    pub attributes: BTreeMap<String, Value>,
    /// OTLP's status code (0 unset, 2 error) and message.
    pub status: (u64, String),
    /// The resource's attributes.
    pub resource: BTreeMap<String, Value>,
    /// OTLP's span flags (W3C trace flags in the low byte).
    pub flags: u32,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&Value> {
        self.attributes.get(key)
    }
}

/// The running receiver.
pub struct OtlpReceiver {
    pub server: LocalServer,
    exports: Arc<Mutex<Vec<Export>>>,
}

impl OtlpReceiver {
    /// Answers every POST `200` with an empty `ExportTraceServiceResponse`.
    pub async fn start() -> Self {
        let exports = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&exports);
        let handler: Handler = Arc::new(move |request| {
            let kept = Arc::clone(&kept);
            Box::pin(async move {
                let path = request.uri().path().to_owned();
                let headers = request
                    .headers()
                    .iter()
                    .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into()))
                    .collect();
                let body = request.into_body().collect().await.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
                kept.lock().unwrap().push(Export { path, headers, body });
                respond(200, "application/x-protobuf", Vec::new())
            })
        });
        Self { server: LocalServer::start(handler).await, exports }
    }

    /// The base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn endpoint(&self) -> String {
        self.server.url("")
    }

    pub fn exports(&self) -> Vec<Export> {
        self.exports.lock().unwrap().clone()
    }

    /// Every span received in trace `trace_id`.
    pub fn spans_of(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        self.exports().iter().flat_map(|export| decode(&export.body)).filter(|span| span.trace_id == trace_id).collect()
    }
}

#[derive(Debug, Clone)]
enum Field {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(Vec<u8>),
}

/// A message's fields, in order (panics on a malformed message: a test failure).
fn fields(mut bytes: &[u8]) -> Vec<(u64, Field)> {
    fn varint(bytes: &mut &[u8]) -> u64 {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let (byte, rest) = bytes.split_first().expect("a truncated varint");
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return value;
            }
            shift += 7;
        }
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes);
        let field = match key & 7 {
            0 => Field::Varint(varint(&mut bytes)),
            1 => {
                let (head, rest) = bytes.split_at(8);
                bytes = rest;
                Field::Fixed64(u64::from_le_bytes(head.try_into().unwrap()))
            }
            2 => {
                let len = usize::try_from(varint(&mut bytes)).unwrap();
                let (head, rest) = bytes.split_at(len);
                bytes = rest;
                Field::Bytes(head.to_vec())
            }
            5 => {
                let (head, rest) = bytes.split_at(4);
                bytes = rest;
                Field::Fixed32(u32::from_le_bytes(head.try_into().unwrap()))
            }
            other => panic!("wire type {other}"),
        };
        out.push((key >> 3, field));
    }
    out
}

fn bytes_of(field: &Field) -> &[u8] {
    match field {
        Field::Bytes(bytes) => bytes,
        other => panic!("not a length-delimited field: {other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

/// `common.v1.AnyValue` as JSON.
fn any_value(bytes: &[u8]) -> Value {
    let Some((number, field)) = fields(bytes).into_iter().next() else { return Value::Null };
    match (number, field) {
        (1, Field::Bytes(bytes)) => json!(text(&bytes)),
        (2, Field::Varint(flag)) => json!(flag != 0),
        (3, Field::Varint(number)) => json!(number as i64),
        (4, Field::Fixed64(bits)) => json!(f64::from_bits(bits)),
        (5, Field::Bytes(array)) => {
            Value::Array(fields(&array).iter().map(|(_, value)| any_value(bytes_of(value))).collect())
        }
        other => panic!("an AnyValue not used by the platform: {other:?}"),
    }
}

/// `common.v1.KeyValue` attributes of a message at field `number`.
fn attributes(message: &[(u64, Field)], number: u64) -> BTreeMap<String, Value> {
    message
        .iter()
        .filter(|(n, _)| *n == number)
        .map(|(_, field)| {
            let pair = fields(bytes_of(field));
            let key = pair.iter().find(|(n, _)| *n == 1).map(|(_, f)| text(bytes_of(f))).unwrap_or_default();
            let value = pair.iter().find(|(n, _)| *n == 2).map(|(_, f)| any_value(bytes_of(f))).unwrap_or(Value::Null);
            (key, value)
        })
        .collect()
}

/// The spans of an `ExportTraceServiceRequest`.
pub fn decode(body: &[u8]) -> Vec<ReceivedSpan> {
    let mut spans = Vec::new();
    for (_, resource_spans) in fields(body).iter().filter(|(n, _)| *n == 1) {
        let resource_spans = fields(bytes_of(resource_spans));
        let resource = resource_spans
            .iter()
            .find(|(n, _)| *n == 1)
            .map(|(_, field)| attributes(&fields(bytes_of(field)), 1))
            .unwrap_or_default();
        for (_, scope_spans) in resource_spans.iter().filter(|(n, _)| *n == 2) {
            for (_, span) in fields(bytes_of(scope_spans)).iter().filter(|(n, _)| *n == 2) {
                let span = fields(bytes_of(span));
                let get = |number: u64| span.iter().find(|(n, _)| *n == number).map(|(_, field)| field.clone());
                let fixed = |number| match get(number) {
                    Some(Field::Fixed64(value)) => value,
                    other => panic!("field {number}: {other:?}"),
                };
                let status = get(15).map_or((0, String::new()), |status| {
                    let status = fields(bytes_of(&status));
                    let code = status.iter().find_map(|(n, f)| match (n, f) {
                        (3, Field::Varint(code)) => Some(*code),
                        _ => None,
                    });
                    let message = status.iter().find(|(n, _)| *n == 2).map(|(_, f)| text(bytes_of(f)));
                    (code.unwrap_or(0), message.unwrap_or_default())
                });
                spans.push(ReceivedSpan {
                    trace_id: hex(bytes_of(&get(1).expect("trace_id"))),
                    span_id: hex(bytes_of(&get(2).expect("span_id"))),
                    parent_span_id: get(4).map(|parent| hex(bytes_of(&parent))),
                    name: get(5).map(|name| text(bytes_of(&name))).unwrap_or_default(),
                    kind: match get(6) {
                        Some(Field::Varint(kind)) => kind,
                        _ => 0,
                    },
                    start_unix_nanos: fixed(7),
                    end_unix_nanos: fixed(8),
                    attributes: attributes(&span, 9),
                    status,
                    resource: resource.clone(),
                    flags: match get(16) {
                        Some(Field::Fixed32(flags)) => flags,
                        _ => 0,
                    },
                });
            }
        }
    }
    spans
}
