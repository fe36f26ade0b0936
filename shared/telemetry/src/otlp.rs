//! OTLP's `ExportTraceServiceRequest` in protobuf, written by hand: the message is small and
//! fixed, and the generated code (prost, opentelemetry-proto) would bring the OpenTelemetry SDK
//! into every run-executing function for a few hundred bytes of output
//! (docs/research/opentelemetry.md §2). Field numbers are opentelemetry-proto v1's
//! (`opentelemetry/proto/trace/v1/trace.proto`, `common/v1/common.proto`,
//! `resource/v1/resource.proto`); the tests decode the output with an independent reader, and
//! the interop suite with the official Python package.

use crate::genai::{SCHEMA_URL, SCOPE_NAME};
use crate::span::{SpanData, Value};

/// Span flags: the W3C trace flags (sampled), "the parent's remoteness is known", "the parent is
/// remote".
const SAMPLED: u32 = 0x01;
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;
const STATUS_ERROR: u64 = 2;

/// The request body exporting `spans` of the process described by `resource`.
pub fn encode_export_request(resource: &[(String, Value)], spans: &[SpanData]) -> Vec<u8> {
    let mut resource_message = Vec::new();
    for (key, value) in resource {
        message_field(&mut resource_message, 1, &key_value(key, value));
    }
    let mut scope = Vec::new();
    string_field(&mut scope, 1, SCOPE_NAME);
    string_field(&mut scope, 2, env!("CARGO_PKG_VERSION"));
    let mut scope_spans = Vec::new();
    message_field(&mut scope_spans, 1, &scope);
    for span in spans {
        message_field(&mut scope_spans, 2, &encode_span(span));
    }
    string_field(&mut scope_spans, 3, SCHEMA_URL);
    let mut resource_spans = Vec::new();
    message_field(&mut resource_spans, 1, &resource_message);
    message_field(&mut resource_spans, 2, &scope_spans);
    let mut request = Vec::new();
    message_field(&mut request, 1, &resource_spans);
    request
}

fn encode_span(span: &SpanData) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    bytes_field(&mut out, 1, span.trace_id.bytes());
    bytes_field(&mut out, 2, span.span_id.bytes());
    if let Some(parent) = &span.parent_span_id {
        bytes_field(&mut out, 4, parent.bytes());
    }
    string_field(&mut out, 5, &span.name);
    varint_field(&mut out, 6, span.kind as u64);
    fixed64_field(&mut out, 7, span.start_unix_nanos);
    fixed64_field(&mut out, 8, span.end_unix_nanos);
    for (key, value) in &span.attributes {
        message_field(&mut out, 9, &key_value(key, value));
    }
    if let Some(description) = &span.error {
        let mut status = Vec::new();
        string_field(&mut status, 2, description);
        varint_field(&mut status, 3, STATUS_ERROR);
        message_field(&mut out, 15, &status);
    }
    let flags = SAMPLED | HAS_IS_REMOTE | if span.remote_parent { IS_REMOTE } else { 0 };
    tag(&mut out, 16, 5);
    out.extend_from_slice(&flags.to_le_bytes());
    out
}

fn key_value(key: &str, value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    string_field(&mut out, 1, key);
    message_field(&mut out, 2, &any_value(value));
    out
}

fn any_value(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    match value {
        Value::Str(text) => string_field_always(&mut out, 1, text),
        Value::Bool(flag) => varint_field_always(&mut out, 2, u64::from(*flag)),
        // int64 is the two's complement as a 64-bit varint.
        Value::Int(number) => varint_field_always(&mut out, 3, *number as u64),
        Value::Float(number) => {
            tag(&mut out, 4, 1);
            out.extend_from_slice(&number.to_bits().to_le_bytes());
        }
        Value::StrArray(items) => {
            let mut array = Vec::new();
            for item in items {
                let mut element = Vec::new();
                string_field_always(&mut element, 1, item);
                message_field(&mut array, 1, &element);
            }
            message_field(&mut out, 5, &array);
        }
    }
    out
}

fn tag(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    varint(out, u64::from(field) << 3 | u64::from(wire_type));
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A scalar field; proto3 leaves zero values out.
fn varint_field(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        varint_field_always(out, field, value);
    }
}

/// A oneof member, written even when zero (its presence is the choice).
fn varint_field_always(out: &mut Vec<u8>, field: u32, value: u64) {
    tag(out, field, 0);
    varint(out, value);
}

fn fixed64_field(out: &mut Vec<u8>, field: u32, value: u64) {
    tag(out, field, 1);
    out.extend_from_slice(&value.to_le_bytes());
}

fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn string_field(out: &mut Vec<u8>, field: u32, text: &str) {
    if !text.is_empty() {
        string_field_always(out, field, text);
    }
}

fn string_field_always(out: &mut Vec<u8>, field: u32, text: &str) {
    bytes_field(out, field, text.as_bytes());
}

fn message_field(out: &mut Vec<u8>, field: u32, message: &[u8]) {
    bytes_field(out, field, message);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{SpanId, TraceId};
    use crate::span::Kind;

    /// A protobuf field as read back: its number and its value.
    #[derive(Debug, Clone, PartialEq)]
    enum Field {
        Varint(u64),
        Fixed64(u64),
        Fixed32(u32),
        Bytes(Vec<u8>),
    }

    /// Reads a message's fields in order (an independent reader of the wire format).
    fn fields(mut bytes: &[u8]) -> Vec<(u64, Field)> {
        fn read_varint(bytes: &mut &[u8]) -> u64 {
            let mut value = 0;
            for shift in (0..64).step_by(7) {
                let byte = bytes[0];
                *bytes = &bytes[1..];
                value |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    break;
                }
            }
            value
        }
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let key = read_varint(&mut bytes);
            let field = match key & 7 {
                0 => Field::Varint(read_varint(&mut bytes)),
                1 => {
                    let (head, rest) = bytes.split_at(8);
                    bytes = rest;
                    Field::Fixed64(u64::from_le_bytes(head.try_into().unwrap()))
                }
                5 => {
                    let (head, rest) = bytes.split_at(4);
                    bytes = rest;
                    Field::Fixed32(u32::from_le_bytes(head.try_into().unwrap()))
                }
                2 => {
                    let len = usize::try_from(read_varint(&mut bytes)).unwrap();
                    let (head, rest) = bytes.split_at(len);
                    bytes = rest;
                    Field::Bytes(head.to_vec())
                }
                other => panic!("wire type {other}"),
            };
            out.push((key >> 3, field));
        }
        out
    }

    fn one(message: &[u8], number: u64) -> Field {
        fields(message).into_iter().find(|(n, _)| *n == number).map(|(_, f)| f).unwrap()
    }

    fn bytes(field: Field) -> Vec<u8> {
        match field {
            Field::Bytes(bytes) => bytes,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_span_is_written_with_opentelemetry_protos_field_numbers() {
        let span = SpanData {
            trace_id: TraceId::random(),
            span_id: SpanId::random(),
            parent_span_id: Some(SpanId::random()),
            name: "chat gpt-4o".into(),
            kind: Kind::Client,
            start_unix_nanos: 1_700_000_000_000_000_000,
            end_unix_nanos: 1_700_000_001_000_000_000,
            attributes: vec![
                ("gen_ai.usage.input_tokens", Value::Int(-3)),
                ("gen_ai.request.stream", Value::Bool(false)),
                ("ttft", Value::Float(0.25)),
                ("gen_ai.response.finish_reasons", Value::StrArray(vec!["stop".into()])),
            ],
            error: Some("boom".into()),
            remote_parent: true,
        };
        let resource = vec![("service.name".to_owned(), Value::from("runner"))];
        let request = encode_export_request(&resource, std::slice::from_ref(&span));
        let resource_spans = bytes(one(&request, 1));
        let resource_message = bytes(one(&resource_spans, 1));
        let attribute = bytes(one(&resource_message, 1));
        assert_eq!(bytes(one(&attribute, 1)), b"service.name");
        assert_eq!(bytes(one(&bytes(one(&attribute, 2)), 1)), b"runner");
        let scope_spans = bytes(one(&resource_spans, 2));
        assert_eq!(bytes(one(&bytes(one(&scope_spans, 1)), 1)), SCOPE_NAME.as_bytes());
        assert_eq!(bytes(one(&scope_spans, 3)), SCHEMA_URL.as_bytes());
        let written = bytes(one(&scope_spans, 2));
        assert_eq!(bytes(one(&written, 1)), span.trace_id.bytes());
        assert_eq!(bytes(one(&written, 2)), span.span_id.bytes());
        assert_eq!(bytes(one(&written, 4)), span.parent_span_id.unwrap().bytes());
        assert_eq!(bytes(one(&written, 5)), b"chat gpt-4o");
        assert_eq!(one(&written, 6), Field::Varint(3));
        assert_eq!(one(&written, 7), Field::Fixed64(span.start_unix_nanos));
        assert_eq!(one(&written, 8), Field::Fixed64(span.end_unix_nanos));
        assert_eq!(one(&written, 16), Field::Fixed32(0x301), "sampled, its parent remote");
        let status = bytes(one(&written, 15));
        assert_eq!(fields(&status), [(2, Field::Bytes(b"boom".to_vec())), (3, Field::Varint(2))]);
        let values: Vec<Vec<(u64, Field)>> = fields(&written)
            .into_iter()
            .filter(|(n, _)| *n == 9)
            .map(|(_, f)| fields(&bytes(one(&bytes(f), 2))))
            .collect();
        assert_eq!(values[0], [(3, Field::Varint(u64::MAX - 2))]);
        assert_eq!(values[1], [(2, Field::Varint(0))]);
        assert_eq!(values[2], [(4, Field::Fixed64(0.25f64.to_bits()))]);
        let array = match &values[3][0] {
            (5, Field::Bytes(array)) => array.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(fields(&bytes(one(&array, 1))), [(1, Field::Bytes(b"stop".to_vec()))]);
    }
}
