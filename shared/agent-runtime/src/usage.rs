//! An account's spend in `UsageTable` (key `owner` + `period`; docs/spend.md):
//!
//! - `{account}` / `budget`: the monthly budget (`limit_micros`, `thresholds_bp`) and the
//!   month's spend: `month` (`YYYY-MM`, UTC), `spent` (the exact cost of every priced model turn
//!   of the month, in 10⁻¹² USD, added as each turn ends) and `reached_bp` (the alert thresholds
//!   already announced this month). A turn of a new month starts the month over.
//! - `{account}` / `day#YYYY-MM-DD` and `{account}#{agent}` / `day#YYYY-MM-DD`: per-day totals of
//!   the runs that ended that day (runs, tokens of each kind, cost), added once per run after
//!   its end (`UsageStore::record_run`).
//!
//! Thresholds are kept in basis points (0.5 is 5 000), so they compare as integers.

use crate::runs::RunRecord;
use crate::spend::micros_rounded_up;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, TransactWriteItem, Update};
use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use platform_data::ids::{AccountId, AgentId};
use serde_json::{Value, json};
use std::collections::HashMap;
use storage::{Item, Read, StoreError, get_item, is_condition_failure, is_transaction_conflict, n, s};

/// The sort key of an account's budget and month item.
const BUDGET: &str = "budget";

/// Basis points in one (a threshold of 1.0 is 10 000).
pub const BASIS_POINTS: u32 = 10_000;

/// The alert thresholds of a budget set without any: half, four fifths, all of it.
pub const DEFAULT_THRESHOLDS_BP: [u32; 3] = [5_000, 8_000, 10_000];

/// How long a per-day total is kept, in days (DynamoDB's TTL deletes it after).
pub const DAY_RETENTION_DAYS: i64 = 400;

/// An account's budget settings: a monthly limit (none: spending is not limited) and the
/// fractions of it that are announced (`budget.threshold_reached`), in basis points, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetSettings {
    pub limit_micros: Option<u64>,
    pub thresholds_bp: Vec<u32>,
}

/// An account's budget and what it spent this month.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetState {
    pub settings: BudgetSettings,
    /// The month the spend is of (`YYYY-MM`, UTC).
    pub month: String,
    /// The month's exact spend, in 10⁻¹² USD.
    pub spent: u128,
    /// The thresholds announced this month, in basis points.
    pub reached_bp: Vec<u32>,
}

/// Why a run may not spend: the account's month reached its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the account's monthly budget of {limit_micros} micro-USD is reached ({used_micros} used)")]
pub struct BudgetReached {
    pub limit_micros: u64,
    pub used_micros: u64,
    /// Seconds until the month ends (when spending may start again).
    pub retry_after_seconds: u64,
}

/// `YYYY-MM` of `now` (UTC).
pub fn month_of(now: DateTime<Utc>) -> String {
    now.format("%Y-%m").to_string()
}

/// The start of the month after `now`'s (UTC).
pub fn next_month_start(now: DateTime<Utc>) -> DateTime<Utc> {
    let (year, month) = if now.month() == 12 { (now.year() + 1, 1) } else { (now.year(), now.month() + 1) };
    Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0).single().unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A threshold as the API shows it: a fraction (5 000 basis points is 0.5).
pub fn threshold_value(basis_points: u32) -> Value {
    json!(f64::from(basis_points) / f64::from(BASIS_POINTS))
}

impl BudgetState {
    /// The month's spend in whole micro-USD, rounded up.
    pub fn used_micros(&self) -> u64 {
        micros_rounded_up(self.spent)
    }

    /// `Err` when the month's spend reached the limit at `now`.
    pub fn allows_spending(&self, now: DateTime<Utc>) -> Result<(), BudgetReached> {
        let Some(limit_micros) = self.settings.limit_micros else { return Ok(()) };
        let used_micros = self.used_micros();
        if used_micros < limit_micros {
            return Ok(());
        }
        let retry_after_seconds = u64::try_from((next_month_start(now) - now).num_seconds()).unwrap_or(0).max(1);
        Err(BudgetReached { limit_micros, used_micros, retry_after_seconds })
    }

    /// The thresholds the month's spend has reached and that were not announced yet.
    pub fn newly_reached(&self) -> Vec<u32> {
        let Some(limit) = self.settings.limit_micros else { return Vec::new() };
        let used = u128::from(self.used_micros()) * u128::from(BASIS_POINTS);
        self.settings
            .thresholds_bp
            .iter()
            .copied()
            .filter(|threshold| !self.reached_bp.contains(threshold))
            .filter(|threshold| used >= u128::from(limit) * u128::from(*threshold))
            .collect()
    }

    /// `GET /budget`'s body.
    pub fn view(&self) -> Value {
        json!({
            "currency": "USD",
            "monthly_limit_micros": self.settings.limit_micros,
            "alert_thresholds": self.settings.thresholds_bp.iter().map(|bp| threshold_value(*bp)).collect::<Vec<_>>(),
            "month": self.month,
            "used_micros": self.used_micros(),
            "thresholds_reached": self.reached_bp.iter().map(|bp| threshold_value(*bp)).collect::<Vec<_>>(),
        })
    }

    /// The item as stored, read for `month` (a stored month that is not it counts as nothing
    /// spent). An unreadable attribute reads as absent: a stored value never stops a run.
    fn of(item: Option<&Item>, month: &str) -> Self {
        let number = |name: &str| item.and_then(|item| item.get(name)).and_then(|value| value.as_n().ok());
        let limit_micros = number("limit_micros").and_then(|text| text.parse().ok());
        let numbers = |name: &str| -> Vec<u32> {
            let values = item.and_then(|item| item.get(name));
            let mut list: Vec<u32> = match values {
                Some(AttributeValue::L(list)) => {
                    list.iter().filter_map(|value| value.as_n().ok()?.parse().ok()).collect()
                }
                Some(AttributeValue::Ns(set)) => set.iter().filter_map(|text| text.parse().ok()).collect(),
                _ => Vec::new(),
            };
            list.sort_unstable();
            list.dedup();
            list
        };
        let thresholds_bp = numbers("thresholds_bp");
        let stored_month = item.and_then(|item| item.get("month")).and_then(|value| value.as_s().ok());
        let this_month = stored_month.is_some_and(|stored| stored == month);
        Self {
            settings: BudgetSettings { limit_micros, thresholds_bp },
            month: month.to_owned(),
            spent: if this_month { number("spent").and_then(|text| text.parse().ok()).unwrap_or(0) } else { 0 },
            reached_bp: if this_month { numbers("reached_bp") } else { Vec::new() },
        }
    }
}

/// One day of `GET /usage`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DayTotals {
    pub date: NaiveDate,
    pub runs: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_micros: u64,
}

impl DayTotals {
    pub fn view(&self) -> Value {
        json!({
            "date": self.date.format("%Y-%m-%d").to_string(),
            "runs": self.runs,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_micros": self.cost_micros,
        })
    }
}

/// The counters of a day item, in the order `DayTotals` has them.
const DAY_COUNTERS: [&str; 6] =
    ["runs", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_micros"];

/// Why one charge attempt failed.
enum Charge {
    /// The item is in a transaction underway: try again.
    Conflict(StoreError),
    Failed(StoreError),
}

/// Pacing of a charge sent again after meeting a threshold's transaction.
const CHARGE_CONTENTION: storage::Backoff = storage::Backoff {
    base: std::time::Duration::from_millis(20),
    cap: std::time::Duration::from_millis(500),
    max_attempts: 8,
};

/// `UsageTable`.
#[derive(Clone)]
pub struct UsageStore {
    db: Client,
    table: String,
}

fn key(owner: String, period: impl Into<String>) -> Item {
    Item::from([("owner".to_owned(), s(owner)), ("period".to_owned(), s(period))])
}

fn day_period(day: NaiveDate) -> String {
    format!("day#{}", day.format("%Y-%m-%d"))
}

impl UsageStore {
    pub fn new(db: Client, table: impl Into<String>) -> Self {
        Self { db, table: table.into() }
    }

    /// The account's budget and its spend in `now`'s month (one strongly consistent GetItem:
    /// a turn just charged by another process is seen).
    pub async fn budget(&self, account: AccountId, now: DateTime<Utc>) -> Result<BudgetState, StoreError> {
        let item = get_item(&self.db, &self.table, key(account.to_string(), BUDGET), Read::CONSISTENT).await?;
        Ok(BudgetState::of(item.as_ref(), &month_of(now)))
    }

    /// Sets the account's budget (one UpdateItem): the month's spend is kept.
    pub async fn set_budget(
        &self,
        account: AccountId,
        settings: &BudgetSettings,
        now: DateTime<Utc>,
    ) -> Result<BudgetState, StoreError> {
        let thresholds = AttributeValue::L(settings.thresholds_bp.iter().map(n).collect());
        let mut update = self
            .db
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(account.to_string(), BUDGET)))
            .expression_attribute_values(":thresholds", thresholds)
            .return_values(ReturnValue::AllNew);
        update = match settings.limit_micros {
            Some(limit) => update
                .update_expression("SET limit_micros = :limit, thresholds_bp = :thresholds")
                .expression_attribute_values(":limit", n(limit)),
            None => update.update_expression("SET thresholds_bp = :thresholds REMOVE limit_micros"),
        };
        let output = update.send().await.map_err(|err| StoreError::dynamo("UpdateItem", err))?;
        Ok(BudgetState::of(output.attributes.as_ref(), &month_of(now)))
    }

    /// Adds `exact` (10⁻¹² USD) to the account's spend of `now`'s month, starting the month over
    /// when the item holds an earlier one (one UpdateItem; two at a month's first charge).
    /// Returns the month as it stands after.
    pub async fn charge(&self, account: AccountId, exact: u128, now: DateTime<Utc>) -> Result<BudgetState, StoreError> {
        // A threshold's claim is a transaction on the same item: a charge that meets one is
        // refused (TransactionConflict) and sent again after a pause, never dropped.
        let mut attempt = 0;
        loop {
            match self.charge_once(account, exact, now).await {
                Err(Charge::Conflict(err)) if attempt + 1 < CHARGE_CONTENTION.max_attempts => {
                    tracing::debug!(%account, error = %err, "charge met a transaction; sent again");
                    attempt += 1;
                    CHARGE_CONTENTION.pause(attempt).await;
                }
                Err(Charge::Conflict(err) | Charge::Failed(err)) => return Err(err),
                Ok(state) => return Ok(state),
            }
        }
    }

    async fn charge_once(&self, account: AccountId, exact: u128, now: DateTime<Utc>) -> Result<BudgetState, Charge> {
        let failed = |err: SdkError<UpdateItemError, HttpResponse>| {
            if is_transaction_conflict(&err) {
                Charge::Conflict(StoreError::dynamo("UpdateItem", err))
            } else {
                Charge::Failed(StoreError::dynamo("UpdateItem", err))
            }
        };
        let month = month_of(now);
        let update = || {
            self.db
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key(account.to_string(), BUDGET)))
                .expression_attribute_names("#month", "month")
                .expression_attribute_values(":spent", n(exact))
                .expression_attribute_values(":month", s(&month))
                .return_values(ReturnValue::AllNew)
        };
        let same_month =
            update().update_expression("ADD spent :spent").condition_expression("#month = :month").send().await;
        let output = match same_month {
            Ok(output) => output,
            Err(err) if is_condition_failure(&err) => {
                // A new month (or the account's first charge): the month starts over, unless
                // another process just did that (then the first form applies after all).
                let new_month = update()
                    .update_expression("SET #month = :month, spent = :spent REMOVE reached_bp")
                    .condition_expression("attribute_not_exists(#month) OR #month < :month")
                    .send()
                    .await;
                match new_month {
                    Ok(output) => output,
                    // The month was set meanwhile (or is a later one, by a clock ahead of
                    // ours): added to it as it stands.
                    Err(err) if is_condition_failure(&err) => update()
                        .update_expression("ADD spent :spent")
                        .condition_expression("#month >= :month")
                        .send()
                        .await
                        .map_err(failed)?,
                    Err(err) => return Err(failed(err)),
                }
            }
            Err(err) => return Err(failed(err)),
        };
        Ok(BudgetState::of(output.attributes.as_ref(), &month))
    }

    /// The write that marks `threshold` announced for `month`, refused when it already was (or
    /// the month moved on): written with the announcement's webhook event, so it is sent once.
    pub fn claim_threshold(
        &self,
        account: AccountId,
        month: &str,
        threshold: u32,
    ) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key(account.to_string(), BUDGET)))
            .update_expression("ADD reached_bp :threshold")
            .condition_expression("#month = :month AND NOT contains(reached_bp, :one)")
            .expression_attribute_names("#month", "month")
            .expression_attribute_values(":threshold", AttributeValue::Ns(vec![threshold.to_string()]))
            .expression_attribute_values(":one", n(threshold))
            .expression_attribute_values(":month", s(month))
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// Writes the claim of a threshold (first) and its announcement in one transaction:
    /// `false` when the claim's condition refused it.
    pub async fn transact(&self, items: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
        crate::runs::transact(&self.db, items).await
    }

    /// The writes that add an ended run to its account's and its agent's totals of the day it
    /// ended (for `RunStore::settle_usage`, which makes them exactly once).
    pub fn run_items(&self, run: &RunRecord) -> Result<Vec<TransactWriteItem>, StoreError> {
        let day = run.finished_at.unwrap_or(run.deadline_at).date_naive();
        let expires = day
            .and_hms_opt(0, 0, 0)
            .map_or(i64::MAX, |start| start.and_utc().timestamp().saturating_add(DAY_RETENTION_DAYS * 86_400));
        let cost = run.cost.map_or(0, |cost| cost.amount_micros);
        let counts = [
            1,
            run.usage.input_tokens,
            run.usage.output_tokens,
            run.usage.cache_read_tokens,
            run.usage.cache_write_tokens,
            cost,
        ];
        let mut values: HashMap<String, AttributeValue> =
            DAY_COUNTERS.iter().zip(counts).map(|(name, count)| (format!(":{name}"), n(count))).collect();
        values.insert(":expires".to_owned(), n(expires));
        let adds: Vec<String> = DAY_COUNTERS.iter().map(|name| format!("{name} :{name}")).collect();
        let expression = format!("ADD {} SET expires_at = if_not_exists(expires_at, :expires)", adds.join(", "));
        let mut items = Vec::new();
        for owner in [run.account_id.to_string(), format!("{}#{}", run.account_id, run.agent_id)] {
            let update = Update::builder()
                .table_name(&self.table)
                .set_key(Some(key(owner, day_period(day))))
                .update_expression(&expression)
                .set_expression_attribute_values(Some(values.clone()))
                .build()
                .map_err(|err| StoreError::request("TransactWriteItems", err))?;
            items.push(TransactWriteItem::builder().update(update).build());
        }
        Ok(items)
    }

    /// The account's (or its agent's) totals of each day from `from` to `to` (inclusive; days
    /// without runs left out), one Query of at most `to - from + 1` small items.
    pub async fn days(
        &self,
        account: AccountId,
        agent: Option<AgentId>,
        from: NaiveDate,
        to: NaiveDate,
    ) -> Result<Vec<DayTotals>, StoreError> {
        let owner = match agent {
            Some(agent) => format!("{account}#{agent}"),
            None => account.to_string(),
        };
        let query = self
            .db
            .query()
            .table_name(&self.table)
            .key_condition_expression("#owner = :owner AND #period BETWEEN :from AND :to")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#period", "period")
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":from", s(day_period(from)))
            .expression_attribute_values(":to", s(day_period(to)));
        let items = storage::query_all(query).await?;
        Ok(items.iter().filter_map(day_totals).collect())
    }
}

/// A day item as totals (an item whose day cannot be read is left out; a counter that cannot
/// be read is 0).
fn day_totals(item: &Item) -> Option<DayTotals> {
    let period = item.get("period")?.as_s().ok()?;
    let date = NaiveDate::parse_from_str(period.strip_prefix("day#")?, "%Y-%m-%d").ok()?;
    let count = |name: &str| -> u64 {
        item.get(name).and_then(|value| value.as_n().ok()).and_then(|text| text.parse().ok()).unwrap_or(0)
    };
    let [runs, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_micros] =
        DAY_COUNTERS.map(count);
    Some(DayTotals { date, runs, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_micros })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spend::MICROS_PER_EXACT_UNIT_DIVISOR;

    fn state(limit: Option<u64>, thresholds: &[u32], used_micros: u64, reached: &[u32]) -> BudgetState {
        BudgetState {
            settings: BudgetSettings { limit_micros: limit, thresholds_bp: thresholds.to_vec() },
            month: "2026-11".into(),
            spent: u128::from(used_micros) * MICROS_PER_EXACT_UNIT_DIVISOR,
            reached_bp: reached.to_vec(),
        }
    }

    #[test]
    fn thresholds_are_reached_once_and_the_limit_stops_spending_until_the_month_ends() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 23, 59, 0).unwrap();
        let half = state(Some(1_000), &DEFAULT_THRESHOLDS_BP, 500, &[]);
        assert_eq!(half.newly_reached(), [5_000]);
        assert!(half.allows_spending(now).is_ok());
        let announced = state(Some(1_000), &DEFAULT_THRESHOLDS_BP, 999, &[5_000]);
        assert_eq!(announced.newly_reached(), [8_000]);
        let full = state(Some(1_000), &DEFAULT_THRESHOLDS_BP, 1_000, &[5_000, 8_000]);
        assert_eq!(full.newly_reached(), [10_000]);
        assert_eq!(
            full.allows_spending(now),
            Err(BudgetReached { limit_micros: 1_000, used_micros: 1_000, retry_after_seconds: 60 })
        );
        assert!(state(None, &DEFAULT_THRESHOLDS_BP, u64::MAX, &[]).allows_spending(now).is_ok());
        assert_eq!(
            next_month_start(Utc.with_ymd_and_hms(2026, 12, 5, 1, 0, 0).unwrap()).to_rfc3339(),
            "2027-01-01T00:00:00+00:00"
        );
    }

    #[test]
    fn a_stored_item_of_another_month_or_with_garbled_values_reads_as_nothing_spent() {
        let item = Item::from([
            ("month".to_owned(), s("2026-10")),
            ("spent".to_owned(), n(5_000_000_u64)),
            ("limit_micros".to_owned(), s("not a number")),
            ("thresholds_bp".to_owned(), AttributeValue::L(vec![n(8_000), s("x"), n(5_000), n(5_000)])),
        ]);
        let read = BudgetState::of(Some(&item), "2026-11");
        assert_eq!((read.spent, read.settings.limit_micros), (0, None));
        assert_eq!(read.settings.thresholds_bp, [5_000, 8_000]);
        assert_eq!(BudgetState::of(Some(&item), "2026-10").used_micros(), 5);
        assert_eq!(BudgetState::of(None, "2026-11").view()["used_micros"], 0);
    }
}
