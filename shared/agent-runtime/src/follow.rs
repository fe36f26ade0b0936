//! Following a run from its recorded events, from any process: a resumed stream (after
//! `Last-Event-ID`) and the stream of a queued run that a worker elsewhere executes.
//!
//! The follower replays the events after the given sequence number, then polls for new ones every
//! `POLL_INTERVAL` until the `done` or `error` event, sending keep-alive comments while nothing
//! happens. If the run ended without a last event recorded (lost, or ended by a read after its
//! deadline), the record's ending closes the stream. It stops after `MAX_FOLLOW` so a streaming
//! function ends before its own limit; the client reconnects with `Last-Event-ID`.
//!
//! DynamoDB calls: one Query per poll (strongly consistent, up to 100 events), and one GetItem of
//! the run record every `RECORD_CHECK_EVERY` polls without events.

use crate::events::{KEEP_ALIVE, RunEvent};
use crate::runs::{RunStatus, RunStore};
use chrono::{DateTime, Utc};
use platform_data::ids::RunId;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often new events are looked for.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Polls without events between two reads of the run record.
pub const RECORD_CHECK_EVERY: u32 = 20;
/// The longest one stream follows a run (a streaming Lambda ends at 15 minutes).
pub const MAX_FOLLOW: Duration = Duration::from_secs(13 * 60);
/// Events read per Query.
const PAGE: i32 = 100;

/// A `Last-Event-ID` header or `last_event_id` parameter: a sequence number; anything else is
/// `None` (the caller answers 400).
pub fn parse_last_event_id(raw: &str) -> Option<u64> {
    raw.trim().parse().ok()
}

/// Follows run `run_id` after event `after`: the SSE frames, ending after the run's last event
/// (or at `MAX_FOLLOW`, or when the receiver is dropped).
pub fn follow(
    runs: RunStore,
    run_id: RunId,
    after: u64,
    clock: Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>,
) -> mpsc::UnboundedReceiver<String> {
    let (frames, receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let follow = relay(&runs, run_id, after, &*clock, &frames);
        if tokio::time::timeout(MAX_FOLLOW, follow).await.is_err() {
            tracing::info!(%run_id, "stream ended at its time limit; the client resumes with Last-Event-ID");
        }
    });
    receiver
}

async fn relay(
    runs: &RunStore,
    run_id: RunId,
    mut after: u64,
    clock: &(dyn Fn() -> DateTime<Utc> + Send + Sync),
    frames: &mpsc::UnboundedSender<String>,
) {
    let mut quiet_polls = 0u32;
    let mut quiet_since = tokio::time::Instant::now();
    loop {
        let events = match runs.events_after(run_id, after, PAGE).await {
            Ok(events) => events,
            Err(err) => {
                tracing::warn!(%run_id, error = %err, "run events not readable; retrying");
                Vec::new()
            }
        };
        let full_page = events.len() == PAGE as usize;
        if !events.is_empty() {
            quiet_polls = 0;
            quiet_since = tokio::time::Instant::now();
        }
        for (seq, event) in events {
            after = seq;
            let last = matches!(event, RunEvent::Done { .. } | RunEvent::Error { .. });
            if frames.send(event.to_sse(seq)).is_err() || last {
                return;
            }
        }
        if full_page {
            continue;
        }
        quiet_polls += 1;
        if quiet_polls.is_multiple_of(RECORD_CHECK_EVERY) {
            match runs.get(run_id, clock()).await {
                Ok(Some(record)) if record.status != RunStatus::Started => {
                    if let Ok(rest) = runs.events_after(run_id, after, PAGE).await
                        && !rest.is_empty()
                    {
                        continue;
                    }
                    // The client holds every recorded event. Ended without its last event
                    // recorded (marked lost), the run's end is said once, numbered after them.
                    let recorded = runs.last_event_seq(run_id).await.unwrap_or(after);
                    let recorded_end = match recorded {
                        0 => false,
                        seq => runs.events_after(run_id, seq - 1, 1).await.is_ok_and(|last| {
                            last.iter()
                                .any(|(_, event)| matches!(event, RunEvent::Done { .. } | RunEvent::Error { .. }))
                        }),
                    };
                    if let Some(seq) = end_to_send(after, recorded, recorded_end) {
                        let _ = frames.send(record.last_event().to_sse(seq));
                    }
                    return;
                }
                Ok(None) => return,
                _ => {}
            }
        }
        if quiet_since.elapsed() >= crate::events::KEEP_ALIVE_INTERVAL {
            if frames.send(KEEP_ALIVE.to_owned()).is_err() {
                return;
            }
            quiet_since = tokio::time::Instant::now();
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The id under which a follower that resumed after event `after` is told how an ended run
/// ended, when the run recorded events up to `recorded` and `recorded_end` says whether the last
/// of them is its end; `None` when the follower already holds the end (the recorded one, or the
/// one this sent before, numbered `recorded + 1`), or names an id never sent.
fn end_to_send(after: u64, recorded: u64, recorded_end: bool) -> Option<u64> {
    (after <= recorded && !recorded_end).then(|| recorded.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_run_says_its_end_once() {
        // Lost after 3 recorded events: the end is event 4, for a follower at 3 or before.
        assert_eq!(end_to_send(3, 3, false), Some(4));
        assert_eq!(end_to_send(0, 0, false), Some(1));
        // The follower already got that end (4), or an id never sent: nothing more.
        assert_eq!(end_to_send(4, 3, false), None);
        assert_eq!(end_to_send(u64::MAX, 3, false), None);
        // The end was recorded and the follower holds it.
        assert_eq!(end_to_send(5, 5, true), None);
        assert_eq!(end_to_send(u64::MAX, u64::MAX, false), Some(u64::MAX));
    }

    #[test]
    fn last_event_ids_are_sequence_numbers() {
        assert_eq!(parse_last_event_id(" 12 "), Some(12));
        assert_eq!(parse_last_event_id("0"), Some(0));
        for bad in ["", "-1", "x", "1.5", "99999999999999999999999"] {
            assert_eq!(parse_last_event_id(bad), None, "{bad}");
        }
    }
}
