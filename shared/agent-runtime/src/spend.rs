//! What a run spent: its tokens per language model, with the prices each model had when the run
//! ran, and the cost they come to (DESIGN.md "Models and spend").
//!
//! Money is integer micro-units (micro-USD). A model's price is per million tokens, so a turn's
//! exact cost is Σ tokens × price in units of 10⁻¹² USD (`exact_cost`, in `u128`: no count
//! overflows it). A run's `cost` rounds up once per model (the ceiling of the model's exact
//! total / 10⁶), then sums the models: what the run reports is never less than what it spent.

use crate::events::Usage;
use platform_data::language_models::{Currency, Pricing};
use serde::{Deserialize, Serialize};

/// The model a run's turns are asked of, as the run saw it: its id and, when it has them, its
/// prices at the time (a later price change does not reprice a run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunModel {
    pub model_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<Pricing>,
}

/// One model's share of a run's spend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSpend {
    #[serde(flatten)]
    pub model: RunModel,
    pub usage: Usage,
}

/// A run's tokens per model (and per price: a model whose price changed between two
/// invocations of one run has an entry per price).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Spend(Vec<ModelSpend>);

/// What a priced run cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    pub currency: Currency,
    pub amount_micros: u64,
}

/// What a run's end reports it spent: its tokens, and their cost when a model it used is
/// priced (the `done` and `error` events, the run record, `run.*` webhooks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bill {
    pub usage: Usage,
    pub cost: Option<Cost>,
}

impl Spend {
    /// The spend's bill: its tokens summed and its cost.
    pub fn bill(&self) -> Bill {
        Bill { usage: self.usage(), cost: self.cost() }
    }
}

/// Micro-units per million: a price per million tokens times tokens, divided by this, is micros.
pub const MICROS_PER_EXACT_UNIT_DIVISOR: u128 = 1_000_000;

/// The exact cost of `usage` at `pricing`, in 10⁻¹² of the currency (micro-units × 10⁻⁶).
pub fn exact_cost(pricing: &Pricing, usage: Usage) -> u128 {
    let part = |tokens: u64, price: u64| u128::from(tokens) * u128::from(price);
    part(usage.input_tokens, pricing.input_per_million_micros)
        .saturating_add(part(usage.output_tokens, pricing.output_per_million_micros))
        .saturating_add(part(usage.cache_read_tokens, pricing.cache_read_per_million_micros))
        .saturating_add(part(usage.cache_write_tokens, pricing.cache_write_per_million_micros))
}

/// An exact cost rounded up to whole micro-units (saturating at `u64::MAX`).
pub fn micros_rounded_up(exact: u128) -> u64 {
    u64::try_from(exact.div_ceil(MICROS_PER_EXACT_UNIT_DIVISOR)).unwrap_or(u64::MAX)
}

impl Spend {
    /// Adds a turn of `model` that used `usage`.
    pub fn add(&mut self, model: &RunModel, usage: Usage) {
        if usage.is_zero() {
            return;
        }
        match self.0.iter_mut().find(|entry| entry.model == *model) {
            Some(entry) => entry.usage.add(usage),
            None => self.0.push(ModelSpend { model: model.clone(), usage }),
        }
    }

    /// Adds everything `other` spent (a sub-agent's run into its parent's).
    pub fn merge(&mut self, other: &Spend) {
        for entry in &other.0 {
            self.add(&entry.model, entry.usage);
        }
    }

    /// Whether nothing was spent.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The tokens of every model, summed.
    pub fn usage(&self) -> Usage {
        let mut total = Usage::default();
        for entry in &self.0 {
            total.add(entry.usage);
        }
        total
    }

    /// The models and what each used.
    pub fn models(&self) -> &[ModelSpend] {
        &self.0
    }

    /// What the run cost: per priced model the ceiling of its exact cost in micro-units, summed;
    /// `None` when no model it used has prices (unpriced models add nothing).
    pub fn cost(&self) -> Option<Cost> {
        let mut priced = self.0.iter().filter_map(|entry| Some((entry.model.pricing?, entry.usage))).peekable();
        let currency = priced.peek()?.0.currency;
        let amount_micros = priced
            .map(|(pricing, usage)| micros_rounded_up(exact_cost(&pricing, usage)))
            .fold(0_u64, u64::saturating_add);
        Some(Cost { currency, amount_micros })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn priced(id: &str, input: u64, output: u64, cache_read: u64, cache_write: u64) -> RunModel {
        RunModel {
            model_id: id.to_owned(),
            pricing: Some(Pricing {
                currency: Currency::Usd,
                input_per_million_micros: input,
                output_per_million_micros: output,
                cache_read_per_million_micros: cache_read,
                cache_write_per_million_micros: cache_write,
            }),
        }
    }

    #[test]
    fn a_cost_rounds_up_once_per_model_and_sums_the_models() {
        // $3 / $15 per million tokens: 1 000 input + 100 output = 3 000 + 1 500 micros.
        let big = priced("big", 3_000_000, 15_000_000, 300_000, 3_750_000);
        // 1 token at 1 micro per million is 10⁻⁶ micros: rounded up, 1 micro for the model.
        let tiny = priced("tiny", 1, 1, 0, 0);
        let mut spend = Spend::default();
        spend.add(&big, Usage::tokens(600, 40));
        spend.add(&big, Usage { input_tokens: 400, output_tokens: 60, cache_read_tokens: 10, cache_write_tokens: 0 });
        spend.add(&tiny, Usage::tokens(1, 0));
        spend.add(&tiny, Usage::tokens(1, 0));
        // big: 1 000 × 3 + 100 × 15 + 10 × 0.3 = 4 503 micros exactly; tiny: 2 × 10⁻⁶ → 1.
        assert_eq!(spend.cost(), Some(Cost { currency: Currency::Usd, amount_micros: 4_504 }));
        assert_eq!(spend.usage().input_tokens, 1_002);
        assert_eq!(spend.models().len(), 2);
    }

    #[test]
    fn unpriced_models_cost_nothing_and_an_unpriced_run_has_no_cost() {
        let free = RunModel { model_id: "free".into(), pricing: None };
        let mut spend = Spend::default();
        spend.add(&free, Usage::tokens(1_000, 1_000));
        assert_eq!(spend.cost(), None);
        spend.add(&priced("p", 1_000_000, 0, 0, 0), Usage::tokens(1, 0));
        assert_eq!(spend.cost().map(|cost| cost.amount_micros), Some(1));
    }

    #[test]
    fn a_model_whose_price_changed_is_priced_at_each_price() {
        let mut spend = Spend::default();
        spend.add(&priced("m", 1_000_000, 0, 0, 0), Usage::tokens(10, 0));
        spend.add(&priced("m", 2_000_000, 0, 0, 0), Usage::tokens(10, 0));
        assert_eq!(spend.cost().map(|cost| cost.amount_micros), Some(30));
    }

    #[test]
    fn spend_is_stored_as_a_list_of_models() {
        let mut spend = Spend::default();
        spend.add(&priced("m", 1, 2, 3, 4), Usage::tokens(5, 6));
        let stored = serde_json::to_value(&spend).unwrap();
        assert_eq!(stored[0]["model_id"], "m");
        assert_eq!(stored[0]["pricing"]["output_per_million_micros"], 2);
        assert_eq!(stored[0]["usage"]["input_tokens"], 5);
        assert_eq!(serde_json::from_value::<Spend>(stored).unwrap(), spend);
    }

    proptest! {
        /// No count or price panics or wraps; the cost is never below the exact cost.
        #[test]
        fn any_counts_and_prices_cost_at_least_the_exact_amount(
            tokens in proptest::array::uniform4(any::<u64>()),
            prices in proptest::array::uniform4(0..=platform_data::language_models::MAX_PRICE_PER_MILLION_MICROS),
        ) {
            let model = priced("m", prices[0], prices[1], prices[2], prices[3]);
            let usage = Usage {
                input_tokens: tokens[0], output_tokens: tokens[1],
                cache_read_tokens: tokens[2], cache_write_tokens: tokens[3],
            };
            let mut spend = Spend::default();
            spend.add(&model, usage);
            let exact = exact_cost(model.pricing.as_ref().unwrap(), usage);
            let cost = spend.cost().unwrap().amount_micros;
            prop_assert!(u128::from(cost) * MICROS_PER_EXACT_UNIT_DIVISOR >= exact || cost == u64::MAX);
        }
    }
}
