//! Why an expression or a time zone is refused.

/// Why [`crate::Schedule::parse`] refused its input.
///
/// The HTTP routes answer [`InvalidExpression`](Self::InvalidExpression) with 422 (the
/// expression itself is malformed) and the other two with 400 (well-formed, but the schedule it
/// configures cannot work).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Malformed: bad syntax, a value out of its field's range, an unknown name, a field the form
    /// does not allow, or an expression longer than [`crate::MAX_EXPRESSION_LEN`]. (422)
    #[error("invalid schedule expression: {0}")]
    InvalidExpression(String),
    /// The time zone is not an IANA time zone name. (400)
    #[error("unknown time zone {0:?}: expected an IANA name such as \"Europe/Berlin\" or \"UTC\"")]
    UnknownTimeZone(String),
    /// Well-formed, but no date ever matches it (such as the 30th of February). (400)
    #[error("the expression never fires: no date matches it")]
    NeverFires,
}

impl ScheduleError {
    /// An [`InvalidExpression`](Self::InvalidExpression) with this detail.
    pub(crate) fn invalid(detail: impl Into<String>) -> Self {
        ScheduleError::InvalidExpression(detail.into())
    }
}
