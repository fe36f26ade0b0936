//! `admin import`'s progress on standard error: what it writes, then how many meetings are
//! written, on one line rewritten in place on a terminal and a line every few seconds otherwise
//! (a log keeps a readable record), and last the time it all took. Standard output keeps only
//! the summary it always printed.

use meeting_data::import::{self, ImportPlan, ImportSummary};
use meeting_data::store::{DirectoryStore, MeetingStore, StoreError};
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

/// How often the line is rewritten on a terminal.
const TERMINAL_EVERY: Duration = Duration::from_millis(100);
/// How often a line is written when standard error is a file or a pipe.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// Writes `plan` as `import::apply` does, saying on standard error how far it is; `started` is
/// when the import began (reading the file included).
pub async fn apply(
    directory: &DirectoryStore,
    meetings: &MeetingStore,
    plan: ImportPlan,
    started: Instant,
) -> Result<ImportSummary, StoreError> {
    let mut stderr = std::io::stderr();
    let mut progress = Progress::new(plan.meetings.len(), stderr.is_terminal(), started);
    let _ = writeln!(stderr, "{}", writing(&plan));
    let mut written = ImportSummary { organizations: 0, users: 0, meetings: 0, transcript_segments: 0 };
    for piece in pieces(plan) {
        add(&mut written, import::apply(directory, meetings, &piece).await?);
        if let Some(line) = progress.update(written.meetings, Instant::now()) {
            let _ = write!(stderr, "{line}");
        }
    }
    let _ = write!(stderr, "{}", progress.finish(Instant::now()));
    Ok(written)
}

/// What the import is about to write.
fn writing(plan: &ImportPlan) -> String {
    let segments: usize = plan.meetings.iter().map(|(_, transcript)| transcript.len()).sum();
    format!(
        "writing {} organizations, {} users and {} meetings ({} transcript segments)",
        thousands(plan.organizations.len()),
        thousands(plan.users.len()),
        thousands(plan.meetings.len()),
        thousands(segments)
    )
}

/// The plan in the pieces it is written in: organizations and users first, then one meeting
/// at a time, so that progress shows between them. Each goes through `import::apply`, the one
/// place that knows how an import is written.
fn pieces(plan: ImportPlan) -> impl Iterator<Item = ImportPlan> {
    // The recording files were uploaded before (`import::upload`).
    let ImportPlan { organizations, users, meetings, uploads: _ } = plan;
    std::iter::once(ImportPlan { organizations, users, meetings: Vec::new(), uploads: Vec::new() }).chain(
        meetings.into_iter().map(|meeting| ImportPlan {
            organizations: Vec::new(),
            users: Vec::new(),
            meetings: vec![meeting],
            uploads: Vec::new(),
        }),
    )
}

fn add(total: &mut ImportSummary, piece: ImportSummary) {
    total.organizations += piece.organizations;
    total.users += piece.users;
    total.meetings += piece.meetings;
    total.transcript_segments += piece.transcript_segments;
}

/// When a progress line is due, and its text.
struct Progress {
    total: usize,
    terminal: bool,
    started: Instant,
    /// When the last line was written.
    shown: Instant,
}

impl Progress {
    fn new(total: usize, terminal: bool, started: Instant) -> Self {
        Self { total, terminal, started, shown: started }
    }

    /// The text to write once `done` meetings are written at `now`, when a line is due.
    fn update(&mut self, done: usize, now: Instant) -> Option<String> {
        let every = if self.terminal { TERMINAL_EVERY } else { LOG_EVERY };
        if done >= self.total || now.saturating_duration_since(self.shown) < every {
            return None;
        }
        self.shown = now;
        let line = format!("imported {} of {} meetings…", thousands(done), thousands(self.total));
        // The line only grows, so rewriting it in place needs no clearing.
        Some(if self.terminal { format!("\r{line}") } else { format!("{line}\n") })
    }

    /// The last line: every meeting, and how long the import took.
    fn finish(&self, now: Instant) -> String {
        let line = format!(
            "imported {} of {} meetings in {:.1} s",
            thousands(self.total),
            thousands(self.total),
            now.saturating_duration_since(self.started).as_secs_f64()
        );
        if self.terminal { format!("\r{line}\n") } else { format!("{line}\n") }
    }
}

/// `12000` as `12,000`.
pub fn thousands(number: usize) -> String {
    let digits = number.to_string();
    let mut grouped = String::new();
    for (position, digit) in digits.chars().enumerate() {
        if position > 0 && (digits.len() - position).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn plan() -> ImportPlan {
        let meeting = |id: i64| {
            serde_json::json!({"id": id, "organization_id": 1, "title": "T", "start_time": "2024-01-01T10:00:00Z",
                "end_time": "2024-01-01T11:00:00Z", "created_at": "2024-01-01T09:00:00Z", "status": "past",
                "host_id": 11, "transcript": [{"start_time": 0.0, "end_time": 1.0}]})
        };
        let document = serde_json::json!({
            "organizations": [{"id": 1, "name": "A"}],
            "users": [{"id": 11, "organization_id": 1, "name": "Ann", "email": "ann@example.com"}],
            "meetings": [meeting(1001), meeting(1002), meeting(1003)],
        });
        let parsed = import::parse_document(document.to_string().as_bytes()).expect("a valid document");
        import::validate(parsed, Vec::new(), Vec::new(), Utc::now()).expect("a valid plan")
    }

    #[test]
    fn a_plan_is_written_as_organizations_and_users_then_one_meeting_at_a_time() {
        let whole = plan();
        assert_eq!(writing(&whole), "writing 1 organizations, 1 users and 3 meetings (3 transcript segments)");
        let pieces: Vec<ImportPlan> = pieces(whole).collect();
        assert_eq!(pieces.len(), 4);
        assert_eq!((pieces[0].organizations.len(), pieces[0].users.len(), pieces[0].meetings.len()), (1, 1, 0));
        let ids: Vec<i64> = pieces[1..].iter().flat_map(|piece| piece.meetings.iter().map(|(m, _)| m.id)).collect();
        assert_eq!(ids, [1001, 1002, 1003]);
        assert!(pieces[1..].iter().all(|piece| piece.organizations.is_empty() && piece.users.is_empty()));
    }

    #[test]
    fn summaries_of_the_pieces_add_up() {
        let mut total = ImportSummary { organizations: 1, users: 2, meetings: 3, transcript_segments: 4 };
        add(&mut total, ImportSummary { organizations: 0, users: 0, meetings: 1, transcript_segments: 5 });
        assert_eq!(total, ImportSummary { organizations: 1, users: 2, meetings: 4, transcript_segments: 9 });
    }

    #[test]
    fn a_terminal_line_is_rewritten_in_place_at_most_every_tenth_of_a_second() {
        let started = Instant::now();
        let mut progress = Progress::new(12_000, true, started);
        assert_eq!(progress.update(1, started + Duration::from_millis(50)), None);
        assert_eq!(
            progress.update(1_000, started + Duration::from_millis(150)).as_deref(),
            Some("\rimported 1,000 of 12,000 meetings…")
        );
        assert_eq!(progress.update(1_001, started + Duration::from_millis(200)), None);
        assert!(progress.update(1_002, started + Duration::from_millis(260)).is_some());
        assert_eq!(
            progress.finish(started + Duration::from_millis(47_240)),
            "\rimported 12,000 of 12,000 meetings in 47.2 s\n"
        );
    }

    #[test]
    fn a_log_gets_a_whole_line_every_few_seconds_and_the_last_with_the_time_taken() {
        let started = Instant::now();
        let mut progress = Progress::new(3_000, false, started);
        assert_eq!(progress.update(10, started + Duration::from_secs(1)), None);
        assert_eq!(
            progress.update(400, started + Duration::from_secs(5)).as_deref(),
            Some("imported 400 of 3,000 meetings…\n")
        );
        assert_eq!(progress.update(500, started + Duration::from_secs(9)), None);
        // The last meeting's line is the summary's.
        assert_eq!(progress.update(3_000, started + Duration::from_secs(60)), None);
        assert_eq!(progress.finish(started + Duration::from_secs(60)), "imported 3,000 of 3,000 meetings in 60.0 s\n");
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        for (number, grouped) in
            [(0, "0"), (999, "999"), (1_000, "1,000"), (12_000, "12,000"), (1_234_567, "1,234,567")]
        {
            assert_eq!(thousands(number), grouped);
        }
    }
}
