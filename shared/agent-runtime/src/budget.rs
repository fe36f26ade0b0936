//! Monthly budgets as runs meet them (docs/spend.md): a run's model turns are checked against
//! the account's budget before they start and charged when they end; a threshold crossed is
//! announced once per month (`budget.threshold_reached`).
//!
//! The check and the charge are apart (a read before the turn, an atomic add after it), so runs
//! of one account executing at once each see the others' finished turns but not the turns they
//! have in flight: the month can pass its limit by at most the turns in flight when it is
//! reached, one per run (a sub-agent's turn is its parent's).

use crate::engine::SpendGate;
use crate::events::Usage;
use crate::spend::{RunModel, exact_cost};
use crate::usage::{BudgetReached, BudgetState, UsageStore, threshold_value};
use aws_env::clock::Clock;
use futures_util::future::BoxFuture;
use platform_data::ids::AccountId;
use serde_json::json;
use webhooks::publisher::Publisher;

/// The event type announcing a threshold.
pub const THRESHOLD_EVENT: &str = "budget.threshold_reached";

/// An account's budget, for the runs of that account.
#[derive(Clone)]
pub struct Budgets {
    pub usage: UsageStore,
    pub events: Option<Publisher>,
    pub clock: Clock,
}

impl std::fmt::Debug for Budgets {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Budgets").finish_non_exhaustive()
    }
}

impl Budgets {
    /// `Err` when the account's month reached its limit. A failed read lets the run go (logged):
    /// a storage hiccup does not stop every account's runs.
    pub async fn allows_spending(&self, account: AccountId) -> Result<(), BudgetReached> {
        let now = (self.clock)();
        match self.usage.budget(account, now).await {
            Ok(state) => state.allows_spending(now),
            Err(err) => {
                tracing::error!(%account, error = %err, "budget not read; the run is let through");
                Ok(())
            }
        }
    }

    /// Charges a turn's exact cost to the account's month and announces the thresholds it
    /// crossed. Nothing is written for an unpriced model; a failure is logged (the run goes on).
    pub async fn charge(&self, account: AccountId, model: &RunModel, usage: Usage) {
        let Some(pricing) = &model.pricing else { return };
        let exact = exact_cost(pricing, usage);
        if exact == 0 {
            return;
        }
        let now = (self.clock)();
        match self.usage.charge(account, exact, now).await {
            Ok(state) => {
                for threshold in state.newly_reached() {
                    self.announce(account, &state, threshold).await;
                }
            }
            Err(err) => tracing::error!(%account, error = %err, "a turn's cost was not charged to the budget"),
        }
    }

    /// Sends `budget.threshold_reached` for `threshold`, once: its claim and its event are one
    /// transaction, refused when another process claimed it first.
    async fn announce(&self, account: AccountId, state: &BudgetState, threshold: u32) {
        let data = json!({
            "threshold": threshold_value(threshold),
            "month": state.month,
            "limit_micros": state.settings.limit_micros,
            "used_micros": state.used_micros(),
            "currency": "USD",
        });
        let claim = match self.usage.claim_threshold(account, &state.month, threshold) {
            Ok(claim) => claim,
            Err(err) => {
                tracing::error!(%account, error = %err, "budget threshold not announced");
                return;
            }
        };
        let prepared = match &self.events {
            Some(events) => match events.prepare(account, THRESHOLD_EVENT, data, (self.clock)()).await {
                Ok(prepared) if prepared.items.len() <= crate::lifecycle::MAX_EVENT_ITEMS => Some(prepared),
                Ok(_) => None,
                Err(err) => {
                    tracing::error!(%account, error = %err, "budget threshold event not prepared");
                    None
                }
            },
            None => None,
        };
        let mut items = vec![claim];
        items.extend(prepared.iter().flat_map(|prepared| prepared.items.clone()));
        match self.usage.transact(items).await {
            Ok(true) => {
                if let (Some(events), Some(prepared)) = (&self.events, prepared) {
                    events.queue(&prepared).await;
                }
            }
            Ok(false) => {}
            Err(err) => tracing::error!(%account, error = %err, "budget threshold not announced"),
        }
    }

    /// The gate of one run of `account`, which its sub-agents share.
    pub fn gate(&self, account: AccountId) -> AccountGate {
        AccountGate { budgets: self.clone(), account }
    }
}

/// The budget check and charge of one account's run.
#[derive(Debug, Clone)]
pub struct AccountGate {
    budgets: Budgets,
    account: AccountId,
}

impl SpendGate for AccountGate {
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.budgets.allows_spending(self.account).await.map_err(|reached| format!("{reached}; the run stopped"))
        })
    }

    fn charge<'a>(&'a self, model: &'a RunModel, usage: Usage) -> BoxFuture<'a, ()> {
        Box::pin(self.budgets.charge(self.account, model, usage))
    }
}
