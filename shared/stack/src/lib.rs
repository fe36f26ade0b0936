//! What `template.yaml` declares (tables, secrets, queues, buckets, functions, routes) and how to create it on a
//! local AWS endpoint.
//!
//! The template is the single source of truth: the local bootstrap creates exactly the tables,
//! indexes, TTL settings and secrets it declares, the dev server routes requests with the paths it
//! declares, and each function gets the environment it declares, with `!Ref`s resolved to local
//! names. Nothing here runs inside a deployed function.

mod bootstrap;
pub mod rest;
mod template;

pub use bootstrap::{BootstrapError, bootstrap};
pub use template::{
    ApiSpec, EnvValue, FunctionSpec, IndexSpec, KeySchema, PythonFunctionSpec, QueueTrigger, Route, ScheduleTrigger,
    TableSpec, Template, TemplateError, bucket_name,
};

/// The project's `template.yaml`, embedded at build time.
pub const TEMPLATE_YAML: &str = include_str!("../../../template.yaml");

/// Local physical name of a template resource: the stack prefix and the logical id.
pub fn physical_name(prefix: &str, logical_id: &str) -> String {
    format!("{prefix}{logical_id}")
}
