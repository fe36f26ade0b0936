//! An incremental Server-Sent Events decoder for the streams servers send (model providers, A2A
//! agents, MCP servers; WHATWG HTML "event stream interpretation"): bytes in, events out, any
//! chunking. Untrusted input: an
//! event larger than the decoder's limit is an error, never unbounded memory.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `event:` (empty when the server named none: the spec's "message").
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The stream broke the decoder's size limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event of the stream is larger than {0} bytes")]
pub struct SseTooLarge(pub usize);

/// Decodes a byte stream into events.
#[derive(Debug)]
pub struct SseDecoder {
    max_event_bytes: usize,
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting the next one belongs to it.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// A decoder refusing events (or lines) over `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            max_event_bytes,
            line: Vec::new(),
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
        }
    }

    /// Feeds a chunk; returns the events it completes.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseTooLarge> {
        let mut events = Vec::new();
        for &byte in chunk {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.take_line(&line) {
                        events.push(event);
                    }
                }
                _ => {
                    if self.line.len() >= self.max_event_bytes {
                        return Err(SseTooLarge(self.max_event_bytes));
                    }
                    self.line.push(byte);
                }
            }
            if self.data.len() + self.event.len() > self.max_event_bytes {
                return Err(SseTooLarge(self.max_event_bytes));
            }
        }
        Ok(events)
    }

    fn take_line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            let data = std::mem::take(&mut self.data);
            return std::mem::take(&mut self.has_data).then_some(SseEvent { event, data });
        }
        if line.first() == Some(&b':') {
            return None;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = value.to_owned(),
            // `id` and `retry` matter to reconnecting browsers, not to one provider response.
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_chunks(stream: &[u8], size: usize) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new(1024);
        stream.chunks(size.max(1)).flat_map(|chunk| decoder.feed(chunk).unwrap()).collect()
    }

    #[test]
    fn events_are_found_whatever_the_chunking_and_line_endings() {
        let stream = b": comment\r\nevent: content_block_delta\r\ndata: {\"a\":1}\r\n\r\ndata: x\rdata:y\r\rid: 7\nretry: 10\n\ndata\n\n";
        let expected = vec![
            SseEvent { event: "content_block_delta".into(), data: "{\"a\":1}".into() },
            SseEvent { event: String::new(), data: "x\ny".into() },
            SseEvent { event: String::new(), data: String::new() },
        ];
        for size in 1..stream.len() {
            assert_eq!(decode_in_chunks(stream, size), expected, "chunks of {size}");
        }
    }

    #[test]
    fn an_event_over_the_limit_is_an_error() {
        let mut decoder = SseDecoder::new(16);
        assert_eq!(decoder.feed(b"data: 0123456789abcdefghij\n\n"), Err(SseTooLarge(16)));
        let mut decoder = SseDecoder::new(16);
        let many_lines = b"data: 0123\ndata: 4567\ndata: 89ab\ndata: cdef\n\n";
        assert_eq!(decoder.feed(many_lines), Err(SseTooLarge(16)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any bytes decode without panicking, and the events do not depend on the chunking.
        #[test]
        fn any_stream_decodes_the_same_in_any_chunks(
            stream in proptest::collection::vec(proptest::sample::select(b"data: x\r\n:event{}".to_vec()), 0..200),
            size in 1usize..17,
        ) {
            let mut whole = SseDecoder::new(64);
            let expected = whole.feed(&stream);
            let mut decoder = SseDecoder::new(64);
            let mut events = Vec::new();
            let mut failed = None;
            for chunk in stream.chunks(size) {
                match decoder.feed(chunk) {
                    Ok(found) => events.extend(found),
                    Err(err) => { failed = Some(err); break; }
                }
            }
            match (expected, failed) {
                (Ok(expected), None) => proptest::prop_assert_eq!(events, expected),
                (Err(expected), Some(err)) => proptest::prop_assert_eq!(err, expected),
                (expected, failed) => proptest::prop_assert!(false, "{expected:?} vs {failed:?}"),
            }
        }
    }
}
