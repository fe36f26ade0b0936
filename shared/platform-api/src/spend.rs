//! `/usage` and `/budget` (docs/spend.md): an account's per-day totals of its runs, and its
//! monthly budget with the month's spend.
//!
//! Calls after the gate: `GET /usage` = 1 Query (at most 92 small items); `GET /budget` =
//! 1 GetItem; `PUT /budget` = 1 UpdateItem.

use crate::envelope::{ApiError, ErrorCode, success};
use crate::gate::{Access, Gate};
use crate::settings;
use agent_runtime::usage::{BASIS_POINTS, BudgetSettings, DEFAULT_THRESHOLDS_BP, UsageStore};
use aws_env::settings::{Lookup, SettingError, required};
use chrono::NaiveDate;
use http::{Method, StatusCode};
use http_api::{Body, HttpFunction, Params, Request, Response, ResponseFuture};
use platform_data::api_keys::Caller;
use platform_data::ids::AgentId;
use platform_data::validation::{Expected, ProblemKind, Problems, check_shape, whole_number};
use serde_json::{Map, Value, json};

/// The most days one `GET /usage` answers.
pub const MAX_USAGE_DAYS: i64 = 92;

/// The largest monthly limit: a billion US dollars.
pub const MAX_MONTHLY_LIMIT_MICROS: u64 = 1_000_000_000_000_000;

/// The most alert thresholds of a budget.
pub const MAX_THRESHOLDS: usize = 10;

/// The spend function: `/usage` and `/budget`.
pub struct SpendService {
    gate: Gate,
    usage: UsageStore,
}

impl SpendService {
    pub fn new(gate: Gate, usage: UsageStore) -> Self {
        Self { gate, usage }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        Ok(Self::new(
            Gate::from_settings(aws, lookup)?,
            UsageStore::new(aws.dynamodb(), required(lookup, settings::USAGE_TABLE)?),
        ))
    }

    /// Reads the time from `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.gate = self.gate.with_clock(clock);
        self
    }

    async fn route(&self, caller: Caller, request: Request) -> Result<Response<Body>, ApiError> {
        let path = request.uri().path().trim_end_matches('/');
        let account = caller.account_id;
        match (path, request.method().clone()) {
            ("/usage", Method::GET) => self.usage(caller, &Params::from_query(request.uri())).await,
            ("/usage", other) => Err(ApiError::method_not_allowed(&other, "GET")),
            ("/budget", Method::GET) => {
                let budget = self.usage.budget(account, self.gate.now()).await?;
                Ok(success(StatusCode::OK, budget.view(), "Budget retrieved"))
            }
            ("/budget", Method::PUT) => {
                let settings = parse_budget(request.body().as_ref())
                    .map_err(|problems| ApiError::from_problems(problems, "budget"))?;
                let budget = self.usage.set_budget(account, &settings, self.gate.now()).await?;
                tracing::info!(%account, limit_micros = ?settings.limit_micros, "budget set");
                Ok(success(StatusCode::OK, budget.view(), "Budget updated"))
            }
            ("/budget", other) => Err(ApiError::method_not_allowed(&other, "GET, PUT")),
            _ => Err(ApiError::not_found("resource")),
        }
    }

    async fn usage(&self, caller: Caller, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let mut date = |name: &str| match params.non_empty(name) {
            None => {
                problems.insert(name.to_owned(), json!("is required (YYYY-MM-DD)"));
                None
            }
            Some(raw) => {
                let parsed = NaiveDate::parse_from_str(raw.trim(), "%Y-%m-%d").ok();
                if parsed.is_none() {
                    problems.insert(name.to_owned(), json!("must be a date, YYYY-MM-DD"));
                }
                parsed
            }
        };
        let (from, to) = (date("from"), date("to"));
        let agent = params.non_empty("agent_id").and_then(|raw| match raw.trim().parse::<AgentId>() {
            Ok(agent) => Some(agent),
            Err(_) => {
                problems.insert("agent_id".into(), json!("must be a UUID"));
                None
            }
        });
        if let (Some(from), Some(to)) = (from, to) {
            let days = (to - from).num_days() + 1;
            if days < 1 {
                problems.insert("to".into(), json!("must not be before from"));
            } else if days > MAX_USAGE_DAYS {
                problems.insert("to".into(), json!(format!("must be at most {MAX_USAGE_DAYS} days from from")));
            }
        }
        let (Some(from), Some(to), true) = (from, to, problems.is_empty()) else {
            return Err(ApiError {
                code: ErrorCode::ValidationError,
                message: "Invalid query parameters.".into(),
                details: problems,
            });
        };
        // An agent id of another account, or of none, reads no days: its totals are keyed by
        // the caller's account.
        let days = self.usage.days(caller.account_id, agent, from, to).await?;
        let data = json!({
            "from": from.format("%Y-%m-%d").to_string(),
            "to": to.format("%Y-%m-%d").to_string(),
            "agent_id": agent,
            "currency": "USD",
            "days": days.iter().map(agent_runtime::usage::DayTotals::view).collect::<Vec<_>>(),
        });
        Ok(success(StatusCode::OK, data, "Usage retrieved"))
    }
}

impl HttpFunction for SpendService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        let access = Access::by_method(&request);
        Box::pin(self.gate.serve(request, access, |caller, request| self.route(caller, request)))
    }
}

/// Reads `PUT /budget`'s body: `monthly_limit_micros` (required: an integer from 1 to
/// `MAX_MONTHLY_LIMIT_MICROS`, or null to remove the limit), `currency` ("USD", optional),
/// `alert_thresholds` (optional, default 0.5, 0.8, 1.0: at most `MAX_THRESHOLDS` distinct
/// fractions above 0 and at most 1, with at most four decimals).
pub fn parse_budget(body: &[u8]) -> Result<BudgetSettings, Problems> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| Problems::single(ProblemKind::BadRequest, "body", &format!("malformed JSON: {err}")))?;
    let Value::Object(body) = value else {
        return Err(Problems::single(ProblemKind::BadRequest, "body", "must be a JSON object"));
    };
    let mut rules = check_shape(
        &body,
        &[
            ("currency", Expected::String),
            ("monthly_limit_micros", Expected::Integer),
            ("alert_thresholds", Expected::NumberArray),
        ],
    )?;
    if let Some(currency) = body.get("currency").and_then(Value::as_str)
        && currency != "USD"
    {
        rules.fail("currency", "must be USD");
    }
    let limit_micros = match body.get("monthly_limit_micros") {
        None => {
            rules.fail("monthly_limit_micros", "is required (null removes the limit)");
            None
        }
        Some(Value::Null) => None,
        Some(value) => match whole_number(value) {
            Some(limit) if (1..=MAX_MONTHLY_LIMIT_MICROS).contains(&limit) => Some(limit),
            _ => {
                rules.fail("monthly_limit_micros", &format!("must be an integer from 1 to {MAX_MONTHLY_LIMIT_MICROS}"));
                None
            }
        },
    };
    let thresholds_bp = match body.get("alert_thresholds").and_then(Value::as_array) {
        None => DEFAULT_THRESHOLDS_BP.to_vec(),
        Some(items) => {
            let mut thresholds = Vec::new();
            if items.len() > MAX_THRESHOLDS {
                rules.fail("alert_thresholds", &format!("must hold at most {MAX_THRESHOLDS} thresholds"));
            }
            for (index, item) in items.iter().enumerate().take(MAX_THRESHOLDS) {
                match item.as_f64().and_then(basis_points) {
                    Some(bp) if thresholds.contains(&bp) => {
                        rules.fail(&format!("alert_thresholds[{index}]"), "is given twice");
                    }
                    Some(bp) => thresholds.push(bp),
                    None => rules.fail(
                        &format!("alert_thresholds[{index}]"),
                        "must be a fraction above 0 and at most 1, with at most four decimals",
                    ),
                }
            }
            thresholds.sort_unstable();
            thresholds
        }
    };
    if !rules.problems.is_empty() {
        return Err(Problems { kind: ProblemKind::Validation, fields: rules.problems });
    }
    Ok(BudgetSettings { limit_micros, thresholds_bp })
}

/// A fraction above 0 and at most 1 with at most four decimals, in basis points.
fn basis_points(fraction: f64) -> Option<u32> {
    if !(fraction > 0.0 && fraction <= 1.0) {
        return None;
    }
    let scaled = fraction * f64::from(BASIS_POINTS);
    let rounded = scaled.round();
    // Within float error of a whole number of basis points (0.0001 steps).
    if (scaled - rounded).abs() > 1e-6 {
        return None;
    }
    // In 1..=10 000 by the range check above: the cast cannot truncate.
    let points = rounded as u32;
    (1..=BASIS_POINTS).contains(&points).then_some(points)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(body: Value) -> Result<BudgetSettings, Problems> {
        parse_budget(body.to_string().as_bytes())
    }

    #[test]
    fn a_budget_is_a_limit_and_thresholds_or_a_removed_limit() {
        assert_eq!(
            parse(json!({"currency": "USD", "monthly_limit_micros": 5_000_000, "alert_thresholds": [1.0, 0.25]})),
            Ok(BudgetSettings { limit_micros: Some(5_000_000), thresholds_bp: vec![2_500, 10_000] })
        );
        assert_eq!(
            parse(json!({"monthly_limit_micros": null})),
            Ok(BudgetSettings { limit_micros: None, thresholds_bp: DEFAULT_THRESHOLDS_BP.to_vec() })
        );
    }

    #[test]
    fn every_wrong_field_is_named() {
        let problems = parse(json!({"currency": "EUR", "monthly_limit_micros": 0,
            "alert_thresholds": [0.5, 0.5, 1.5, 0.00001], "extra": 1}))
        .unwrap_err();
        assert_eq!(problems.kind, ProblemKind::Validation);
        let fields: Vec<&str> = problems.fields.keys().map(String::as_str).collect();
        assert_eq!(
            fields,
            [
                "alert_thresholds[1]",
                "alert_thresholds[2]",
                "alert_thresholds[3]",
                "currency",
                "extra",
                "monthly_limit_micros"
            ]
        );
        assert_eq!(
            parse(json!({})).unwrap_err().fields["monthly_limit_micros"],
            "is required (null removes the limit)"
        );
        let wrong_type = parse(json!({"monthly_limit_micros": "5", "alert_thresholds": "half"})).unwrap_err();
        assert_eq!(wrong_type.kind, ProblemKind::BadRequest);
        assert_eq!(parse_budget(b"[1]").unwrap_err().kind, ProblemKind::BadRequest);
    }

    proptest! {
        /// Any bytes: no panic, and an answer that is a budget or named problems.
        #[test]
        fn any_body_is_answered(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            match parse_budget(&body) {
                Ok(settings) => prop_assert!(settings.thresholds_bp.len() <= MAX_THRESHOLDS),
                Err(problems) => prop_assert!(!problems.fields.is_empty()),
            }
        }

        /// Any limit and thresholds: accepted exactly when in range.
        #[test]
        fn any_numbers_are_checked(limit in any::<i64>(), threshold in any::<f64>()) {
            let parsed = parse(json!({"monthly_limit_micros": limit, "alert_thresholds": [threshold]}));
            let limit_ok = u64::try_from(limit).is_ok_and(|limit| (1..=MAX_MONTHLY_LIMIT_MICROS).contains(&limit));
            if parsed.is_ok() {
                prop_assert!(limit_ok && threshold > 0.0 && threshold <= 1.0);
            }
        }
    }
}
