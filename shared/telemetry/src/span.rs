//! Spans of a run, recorded in memory and exported when the invocation ends (`trace-export`).
//!
//! The span a piece of work belongs to travels with the future doing it (a tokio task-local set
//! by [`Span::run`]), so code far from the run (the outbound client's `traceparent`, the MCP
//! client's spans) finds it without every signature naming it. Outside a run nothing is
//! current: [`Span::start`] then records nothing and costs next to nothing.

use crate::context::{SpanContext, SpanId, TraceId};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

/// Most spans one recorder keeps before the next export (X-Ray's OTLP endpoint takes 10,000 a
/// request); later ones are counted as dropped.
pub const MAX_SPANS: usize = 10_000;

/// Most characters of a recorded string attribute (X-Ray takes 200 KB a span).
pub const MAX_VALUE_CHARS: usize = 16 * 1024;

/// OpenTelemetry's span kinds (their OTLP numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
    Producer = 4,
    Consumer = 5,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Bool(bool),
    Int(i64),
    Float(f64),
    StrArray(Vec<String>),
}

impl From<&str> for Value {
    fn from(value: &str) -> Self {
        Self::from(value.to_owned())
    }
}

impl From<String> for Value {
    fn from(mut value: String) -> Self {
        if let Some((cut, _)) = value.char_indices().nth(MAX_VALUE_CHARS) {
            value.truncate(cut);
        }
        Self::Str(value)
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Self {
        Self::Bool(value)
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Self::Int(value)
    }
}

impl From<u64> for Value {
    fn from(value: u64) -> Self {
        Self::Int(i64::try_from(value).unwrap_or(i64::MAX))
    }
}

impl From<u32> for Value {
    fn from(value: u32) -> Self {
        Self::Int(i64::from(value))
    }
}

impl From<f64> for Value {
    fn from(value: f64) -> Self {
        Self::Float(value)
    }
}

impl From<Vec<String>> for Value {
    fn from(value: Vec<String>) -> Self {
        Self::StrArray(value)
    }
}

/// A finished span, as exported.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanData {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent_span_id: Option<SpanId>,
    pub name: String,
    pub kind: Kind,
    /// Nanoseconds since the Unix epoch.
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    pub attributes: Vec<(&'static str, Value)>,
    /// `Some(description)` when the span failed (status `ERROR`); unset otherwise.
    pub error: Option<String>,
    /// Whether its parent is another process's span (a request's `traceparent`).
    pub remote_parent: bool,
}

impl SpanData {
    /// A span `context` under `parent`, starting now, not yet ended.
    fn begun(context: SpanContext, parent: Option<SpanId>, remote_parent: bool, name: String, kind: Kind) -> Self {
        Self {
            trace_id: context.trace_id,
            span_id: context.span_id,
            parent_span_id: parent,
            name,
            kind,
            start_unix_nanos: unix_nanos(SystemTime::now()),
            end_unix_nanos: 0,
            attributes: Vec::new(),
            error: None,
            remote_parent,
        }
    }

    /// The value of attribute `key`, if set.
    pub fn attribute(&self, key: &str) -> Option<&Value> {
        self.attributes.iter().rev().find(|(name, _)| *name == key).map(|(_, value)| value)
    }
}

/// Where an invocation's spans wait for their export (cheap to clone; clones share them).
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    spans: Arc<Mutex<Vec<SpanData>>>,
    dropped: Arc<AtomicU64>,
}

impl Recorder {
    fn push(&self, span: SpanData) {
        let mut spans = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
        if spans.len() < MAX_SPANS {
            spans.push(span);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The spans recorded so far (they are no longer held), and how many were dropped.
    pub fn take(&self) -> (Vec<SpanData>, u64) {
        let spans = std::mem::take(&mut *self.spans.lock().unwrap_or_else(PoisonError::into_inner));
        (spans, self.dropped.swap(0, Ordering::Relaxed))
    }
}

/// What the work being done belongs to.
#[derive(Debug, Clone)]
struct Current {
    recorder: Recorder,
    context: SpanContext,
    capture_content: bool,
}

tokio::task_local! {
    static CURRENT: Current;
}

fn current() -> Option<Current> {
    CURRENT.try_with(Current::clone).ok()
}

/// The span the current work belongs to, if it is part of a trace.
pub fn current_context() -> Option<SpanContext> {
    CURRENT.try_with(|current| current.context).ok()
}

/// The `traceparent` header for a request the current work makes.
pub fn current_traceparent() -> Option<String> {
    current_context().map(|context| context.traceparent())
}

/// Whether the current trace records content (prompts, answers, tool arguments and results):
/// only when the stack turns it on.
pub fn captures_content() -> bool {
    CURRENT.try_with(|current| current.capture_content).unwrap_or(false)
}

/// Nanoseconds since the Unix epoch (0 for a clock before it).
pub fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A span being recorded; it is recorded when ended or dropped (a cancelled piece of work still
/// shows). A span started outside a trace records nothing.
#[derive(Debug)]
pub struct Span {
    data: Option<SpanData>,
    recorder: Option<Recorder>,
    capture_content: bool,
}

impl Span {
    /// A child of the current span, starting now.
    pub fn start(name: impl Into<String>, kind: Kind) -> Self {
        let Some(current) = current() else { return Self::none() };
        let context = SpanContext { trace_id: current.context.trace_id, span_id: SpanId::random() };
        let data = SpanData::begun(context, Some(current.context.span_id), false, name.into(), kind);
        Self { data: Some(data), recorder: Some(current.recorder), capture_content: current.capture_content }
    }

    /// The first span of a trace's part kept by `recorder`, with the ids the run was given (a run
    /// continued by another invocation keeps its span's id); `parent` is the caller's span, in
    /// another process.
    pub fn root(
        recorder: &Recorder,
        context: SpanContext,
        parent: Option<SpanId>,
        name: impl Into<String>,
        kind: Kind,
        capture_content: bool,
    ) -> Self {
        let data = SpanData::begun(context, parent, parent.is_some(), name.into(), kind);
        Self { data: Some(data), recorder: Some(recorder.clone()), capture_content }
    }

    /// A span that records nothing.
    pub fn none() -> Self {
        Self { data: None, recorder: None, capture_content: false }
    }

    /// Whether anything is recorded.
    pub fn is_recording(&self) -> bool {
        self.data.is_some()
    }

    /// Whether this span's trace records content.
    pub fn captures_content(&self) -> bool {
        self.data.is_some() && self.capture_content
    }

    /// Its ids, for the children it has in other processes.
    pub fn context(&self) -> Option<SpanContext> {
        self.data.as_ref().map(|data| SpanContext { trace_id: data.trace_id, span_id: data.span_id })
    }

    /// Moves its start (a span for time that began before this process knew of it: a queue wait).
    pub fn started_at(mut self, time: SystemTime) -> Self {
        if let Some(data) = &mut self.data {
            data.start_unix_nanos = unix_nanos(time);
        }
        self
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        if let Some(data) = &mut self.data {
            data.attributes.push((key, value.into()));
        }
    }

    /// Sets a content attribute (a prompt, an answer, a tool's arguments) only when the trace
    /// records content; `value` is not even built otherwise.
    pub fn set_content(&mut self, key: &'static str, value: impl FnOnce() -> String) {
        if self.captures_content() {
            self.set(key, value());
        }
    }

    /// Marks it failed: `error.type` (a short, low-cardinality kind) and the status description.
    /// The description is `error_type` unless the trace records content: an error's text can quote
    /// what a tool or provider answered (a response body, an exception).
    pub fn fail(&mut self, error_type: &str, description: &str) {
        if let Some(data) = &mut self.data {
            data.attributes.push((crate::genai::ERROR_TYPE, Value::from(error_type)));
            let description = if self.capture_content { description } else { error_type };
            data.error = Some(description.chars().take(1024).collect());
        }
    }

    /// Runs `work` with this span as the current one (its spans are children of this one).
    pub async fn run<F: Future>(&self, work: F) -> F::Output {
        match (&self.data, &self.recorder) {
            (Some(data), Some(recorder)) => {
                let current = Current {
                    recorder: recorder.clone(),
                    context: SpanContext { trace_id: data.trace_id, span_id: data.span_id },
                    capture_content: self.capture_content,
                };
                CURRENT.scope(current, work).await
            }
            _ => work.await,
        }
    }

    /// Ends it now.
    pub fn end(self) {
        drop(self);
    }

    /// Ends it at `time`.
    pub fn end_at(mut self, time: SystemTime) {
        if let Some(data) = &mut self.data {
            data.end_unix_nanos = unix_nanos(time);
        }
    }

    /// Drops it unrecorded (a run's span when the run paused: the invocation that ends the run
    /// records it).
    pub fn discard(mut self) {
        self.data = None;
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let (Some(mut data), Some(recorder)) = (self.data.take(), self.recorder.take()) {
            if data.end_unix_nanos == 0 {
                data.end_unix_nanos = unix_nanos(SystemTime::now());
            }
            data.end_unix_nanos = data.end_unix_nanos.max(data.start_unix_nanos);
            recorder.push(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn spans_nest_by_the_work_they_wrap_and_nothing_is_recorded_outside_a_trace() {
        assert!(!Span::start("outside", Kind::Internal).is_recording());
        assert_eq!(current_traceparent(), None);
        let recorder = Recorder::default();
        let context = SpanContext { trace_id: TraceId::random(), span_id: SpanId::random() };
        let root = Span::root(&recorder, context, None, "root", Kind::Internal, false);
        root.run(async {
            assert_eq!(current_traceparent(), Some(context.traceparent()));
            let child = Span::start("child", Kind::Client);
            child
                .run(async {
                    let mut grandchild = Span::start("grandchild", Kind::Internal);
                    grandchild.set_content("content", || unreachable!("content is off"));
                    grandchild.fail("timeout", "took too long: the server said 'secret'");
                })
                .await;
        })
        .await;
        root.end();
        let (spans, dropped) = recorder.take();
        assert_eq!(dropped, 0);
        let names: Vec<&str> = spans.iter().map(|span| span.name.as_str()).collect();
        assert_eq!(names, ["grandchild", "child", "root"]);
        assert_eq!(spans[0].parent_span_id, Some(spans[1].span_id));
        assert_eq!(spans[1].parent_span_id, Some(context.span_id));
        assert!(spans.iter().all(|span| span.trace_id == context.trace_id));
        assert_eq!(spans[0].error.as_deref(), Some("timeout"), "no error text without content capture");
        assert_eq!(spans[0].attribute("error.type"), Some(&Value::from("timeout")));
        assert!(spans.iter().all(|span| span.end_unix_nanos >= span.start_unix_nanos));
    }

    #[test]
    fn a_full_recorder_counts_what_it_drops_and_long_values_are_cut() {
        let recorder = Recorder::default();
        let context = SpanContext { trace_id: TraceId::random(), span_id: SpanId::random() };
        for _ in 0..MAX_SPANS + 3 {
            Span::root(&recorder, context, None, "s", Kind::Internal, false).end();
        }
        let (spans, dropped) = recorder.take();
        assert_eq!((spans.len(), dropped), (MAX_SPANS, 3));
        assert_eq!(recorder.take().0.len(), 0);
        let Value::Str(cut) = Value::from("é".repeat(MAX_VALUE_CHARS + 5)) else { unreachable!() };
        assert_eq!(cut.chars().count(), MAX_VALUE_CHARS);
    }
}
