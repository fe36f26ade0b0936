//! Trace and span ids, and the two headers a trace context arrives in: W3C `traceparent` and
//! AWS X-Ray's `X-Amzn-Trace-Id` (API Gateway's, Lambda's). Both are untrusted input: a header
//! that does not parse is ignored (the run starts a trace of its own), never an error.

use std::fmt;

/// A W3C trace id: 16 bytes, never all zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId([u8; 16]);

/// A span id: 8 bytes, never all zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId([u8; 8]);

impl TraceId {
    /// A new random id (122 random bits: a v4 UUID's).
    pub fn random() -> Self {
        Self(*uuid::Uuid::new_v4().as_bytes())
    }

    pub fn bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// From 32 lowercase hex digits; `None` for anything else or all zeros.
    pub fn from_hex(text: &str) -> Option<Self> {
        let bytes = hex_bytes::<16>(text)?;
        (bytes != [0; 16]).then_some(Self(bytes))
    }
}

impl SpanId {
    /// A new random id.
    pub fn random() -> Self {
        let uuid = uuid::Uuid::new_v4();
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&uuid.as_bytes()[8..]);
        // A v4 UUID's variant bits make its second half non-zero.
        Self(bytes)
    }

    pub fn bytes(&self) -> &[u8; 8] {
        &self.0
    }

    /// From 16 lowercase hex digits; `None` for anything else or all zeros.
    pub fn from_hex(text: &str) -> Option<Self> {
        let bytes = hex_bytes::<8>(text)?;
        (bytes != [0; 8]).then_some(Self(bytes))
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceId({self})")
    }
}

impl fmt::Debug for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpanId({self})")
    }
}

/// Exactly `2 * N` lowercase hex digits as bytes.
fn hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let value = |digit: u8| match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    };
    let mut bytes = [0; N];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = value(pair[0])? << 4 | value(pair[1])?;
    }
    Some(bytes)
}

/// A span as other processes see it: the trace it is in and its own id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: TraceId,
    pub span_id: SpanId,
}

impl SpanContext {
    /// The `traceparent` header naming this span as the parent (always sampled: the platform
    /// records every run's trace).
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

/// Where an incoming request says a trace continues from: its trace and, when the header names
/// one, the caller's span (X-Ray's `Root` without `Parent` names only the trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: TraceId,
    pub span_id: Option<SpanId>,
}

impl Parent {
    /// A W3C `traceparent` (version `00`: exactly `00-<32 hex>-<16 hex>-<2 hex>`; a later version
    /// may append `-…` fields, which are ignored). Uppercase hex, version `ff`, all-zero ids:
    /// `None`, as the W3C recommendation says.
    pub fn from_traceparent(header: &str) -> Option<Self> {
        let header = header.trim_matches([' ', '\t']);
        let head = header.get(..55)?;
        let rest = &header[55..];
        let mut fields = head.split('-');
        let (version, trace, span, flags) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        let version = hex_bytes::<1>(version)?[0];
        let valid_tail = if version == 0 { rest.is_empty() } else { rest.is_empty() || rest.starts_with('-') };
        if version == 0xff || !valid_tail || hex_bytes::<1>(flags).is_none() {
            return None;
        }
        Some(Self { trace_id: TraceId::from_hex(trace)?, span_id: Some(SpanId::from_hex(span)?) })
    }

    /// An X-Ray header: `Root=1-<8 hex>-<24 hex>[;Parent=<16 hex>][;Sampled=…][;…]`, fields in
    /// any order. The X-Ray root's two parts are the W3C trace id's 32 digits.
    pub fn from_xray(header: &str) -> Option<Self> {
        let mut root = None;
        let mut parent = None;
        for field in header.split(';') {
            let Some((key, value)) = field.trim().split_once('=') else { continue };
            match key {
                "Root" => root = Some(value),
                "Parent" => parent = Some(value),
                _ => {}
            }
        }
        let root = root?;
        let mut parts = root.split('-');
        let (version, time, random) = (parts.next()?, parts.next()?, parts.next()?);
        if version != "1" || parts.next().is_some() || time.len() != 8 || random.len() != 24 {
            return None;
        }
        let trace_id = TraceId::from_hex(&format!("{time}{random}"))?;
        Some(Self { trace_id, span_id: parent.and_then(SpanId::from_hex) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_traceparent_parses_as_the_w3c_recommendation_says() {
        let parent = Parent::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(parent.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.span_id.unwrap().to_string(), "00f067aa0ba902b7");
        // Unsampled parents are still parents.
        assert!(Parent::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").is_some());
        // A later version may add fields; version 00 may not.
        assert!(Parent::from_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra").is_some());
        for refused in [
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
            "",
        ] {
            assert_eq!(Parent::from_traceparent(refused), None, "{refused}");
        }
    }

    #[test]
    fn an_xray_header_names_the_same_trace_as_its_w3c_form() {
        let parent =
            Parent::from_xray("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1").unwrap();
        assert_eq!(parent.trace_id.to_string(), "5759e988bd862e3fe1be46a994272793");
        assert_eq!(parent.span_id.unwrap().to_string(), "53995c3f42cd8ad8");
        let no_parent = Parent::from_xray("Sampled=0;Root=1-5759e988-bd862e3fe1be46a994272793;Lineage=a:1").unwrap();
        assert_eq!(no_parent.span_id, None);
        for refused in ["Root=2-5759e988-bd862e3fe1be46a994272793", "Root=1-5759e988", "Parent=53995c3f42cd8ad8", ""] {
            assert_eq!(Parent::from_xray(refused), None, "{refused}");
        }
    }

    #[test]
    fn a_span_context_writes_a_traceparent_that_parses_back() {
        let context = SpanContext { trace_id: TraceId::random(), span_id: SpanId::random() };
        let parsed = Parent::from_traceparent(&context.traceparent()).unwrap();
        assert_eq!((parsed.trace_id, parsed.span_id), (context.trace_id, Some(context.span_id)));
    }

    proptest! {
        // Untrusted headers: any text parses to an answer or `None`, never a panic, and what
        // parses names valid ids.
        #[test]
        fn any_header_parses_without_panicking(header in ".{0,80}") {
            for parent in [Parent::from_traceparent(&header), Parent::from_xray(&header)].into_iter().flatten() {
                prop_assert_ne!(parent.trace_id.bytes(), &[0; 16]);
            }
        }

        #[test]
        fn any_well_formed_traceparent_round_trips(trace in "[0-9a-f]{32}", span in "[0-9a-f]{16}") {
            let header = format!("00-{trace}-{span}-01");
            let parsed = Parent::from_traceparent(&header);
            if trace.bytes().all(|b| b == b'0') || span.bytes().all(|b| b == b'0') {
                prop_assert_eq!(parsed, None);
            } else {
                let parsed = parsed.unwrap();
                prop_assert_eq!(parsed.trace_id.to_string(), trace);
                prop_assert_eq!(parsed.span_id.map(|id| id.to_string()), Some(span));
            }
        }
    }
}
