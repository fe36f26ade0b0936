//! Reading a function's settings.
//!
//! Settings are read through a lookup function rather than `std::env` directly, so the dev server
//! can run several functions in one process, each with the environment `template.yaml` gives it.

/// A source of settings: `std::env` in a function, a map in the dev server and tests.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as a lookup.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A required setting is missing or invalid.
#[derive(Debug, thiserror::Error)]
#[error("setting {name}: {problem}")]
pub struct SettingError {
    pub name: &'static str,
    pub problem: String,
}

/// A required, non-empty setting.
pub fn required(lookup: Lookup, name: &'static str) -> Result<String, SettingError> {
    lookup(name).filter(|value| !value.is_empty()).ok_or(SettingError { name, problem: "missing".into() })
}

/// An optional setting parsed as a number, with a default.
pub fn number_or(lookup: Lookup, name: &'static str, default: i64) -> Result<i64, SettingError> {
    match lookup(name).filter(|value| !value.is_empty()) {
        None => Ok(default),
        Some(value) => value.parse().map_err(|_| SettingError { name, problem: format!("not a number: {value:?}") }),
    }
}

/// An optional setting that must be a positive integer (a rate limit's capacity or rate), with a
/// default.
pub fn positive_or(lookup: Lookup, name: &'static str, default: u32) -> Result<u32, SettingError> {
    let value = number_or(lookup, name, i64::from(default))?;
    u32::try_from(value)
        .ok()
        .filter(|value| *value > 0)
        .ok_or(SettingError { name, problem: format!("must be a positive integer, not {value}") })
}
