//! The SDK clients of a process: one per AWS service, shared by every store that uses the
//! service.
//!
//! Building a client is not free: each one assembles its configuration layers (~0.1 M
//! instructions), and the first client of a service makes the SDK parse that service's endpoint
//! partition table, regexes included (~0.4 M). A function that built a client per store paid the
//! first for every store, and the second for every service its requests might never call
//! (`docs/performance.md`, cold start).
//!
//! So [`Clients`] builds each service's client once:
//! - DynamoDB when first asked for, which is at init: every request of every function reads it.
//! - Secrets Manager and SQS at their first call ([`Lazy`]): secrets are read once per
//!   process and cached, the queues are written by some requests only (a run that continues, an
//!   event someone subscribed to).

use aws_types::SdkConfig;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, LazyLock};

/// A client built at its first use, then shared by every clone of the handle.
pub struct Lazy<C>(Arc<LazyLock<C, Box<dyn FnOnce() -> C + Send>>>);

impl<C: 'static> Lazy<C> {
    /// A client that `build` makes when it is first used.
    pub fn new(build: impl FnOnce() -> C + Send + 'static) -> Self {
        Self(Arc::new(LazyLock::new(Box::new(build))))
    }
}

impl<C> Lazy<C> {
    /// Whether this handle (or a clone of it) has been used, so its client built (tests). A
    /// handle from [`Clients`] may find its client built already through another handle.
    pub fn is_built(this: &Self) -> bool {
        LazyLock::get(&this.0).is_some()
    }
}

impl<C: Send + 'static> From<C> for Lazy<C> {
    /// A client built already (tests, tools).
    fn from(client: C) -> Self {
        Self::new(move || client)
    }
}

impl<C> Deref for Lazy<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.0
    }
}

impl<C> Clone for Lazy<C> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<C> fmt::Debug for Lazy<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if Self::is_built(self) { "Lazy(built)" } else { "Lazy(not built)" })
    }
}

/// The process's AWS configuration and its SDK clients, one per service (see the module's
/// documentation for when each is built). Cloning shares the clients.
///
/// A service's client code is linked only into the functions that ask for it: each accessor
/// names its constructor, and `new` names none.
#[derive(Clone, Debug)]
pub struct Clients {
    config: SdkConfig,
    #[cfg(feature = "dynamodb")]
    dynamodb: Arc<std::sync::OnceLock<aws_sdk_dynamodb::Client>>,
    #[cfg(feature = "secretsmanager")]
    secrets: Arc<std::sync::OnceLock<aws_sdk_secretsmanager::Client>>,
    #[cfg(feature = "sqs")]
    sqs: Arc<std::sync::OnceLock<aws_sdk_sqs::Client>>,
}

impl Clients {
    /// The clients of `config`; none is built yet.
    pub fn new(config: SdkConfig) -> Self {
        Self {
            config,
            #[cfg(feature = "dynamodb")]
            dynamodb: Arc::default(),
            #[cfg(feature = "secretsmanager")]
            secrets: Arc::default(),
            #[cfg(feature = "sqs")]
            sqs: Arc::default(),
        }
    }

    /// The clients of `config`, DynamoDB's being `dynamodb` (tests: a client that records its
    /// calls); the others are built as `new`'s are.
    #[cfg(feature = "dynamodb")]
    pub fn with_dynamodb(config: SdkConfig, dynamodb: aws_sdk_dynamodb::Client) -> Self {
        let clients = Self::new(config);
        clients.dynamodb.get_or_init(|| dynamodb);
        clients
    }

    /// The AWS configuration the clients are built from, for a client that needs its own
    /// settings (the tool sandbox's Lambda invoker).
    pub fn config(&self) -> &SdkConfig {
        &self.config
    }

    /// The DynamoDB client, built now if it was not yet.
    #[cfg(feature = "dynamodb")]
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        self.dynamodb.get_or_init(|| aws_sdk_dynamodb::Client::new(&self.config)).clone()
    }

    /// The Secrets Manager client, built at its first call.
    #[cfg(feature = "secretsmanager")]
    pub fn secrets(&self) -> Lazy<aws_sdk_secretsmanager::Client> {
        self.lazy(&self.secrets, aws_sdk_secretsmanager::Client::new)
    }

    /// The SQS client, built at its first call.
    #[cfg(feature = "sqs")]
    pub fn sqs(&self) -> Lazy<aws_sdk_sqs::Client> {
        self.lazy(&self.sqs, aws_sdk_sqs::Client::new)
    }

    /// A handle on the client in `cell`, which the first use of any handle builds.
    #[cfg(any(feature = "secretsmanager", feature = "sqs"))]
    fn lazy<C>(&self, cell: &Arc<std::sync::OnceLock<C>>, build: fn(&SdkConfig) -> C) -> Lazy<C>
    where
        C: Clone + Send + Sync + 'static,
    {
        let (cell, config) = (Arc::clone(cell), self.config.clone());
        Lazy::new(move || cell.get_or_init(|| build(&config)).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_lazy_client_is_built_once_at_its_first_use_and_shared_by_its_clones() {
        let builds = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&builds);
        let client = Lazy::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            String::from("client")
        });
        let clone = client.clone();
        assert!(!Lazy::is_built(&client));
        assert_eq!(builds.load(Ordering::SeqCst), 0);
        assert_eq!(clone.len(), 6);
        assert!(Lazy::is_built(&client), "a clone's use builds the shared client");
        assert_eq!(&*client, "client");
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        assert_eq!(format!("{client:?}"), "Lazy(built)");
    }

    #[test]
    fn a_built_client_is_used_as_it_is() {
        let client = Lazy::from(vec![1, 2, 3]);
        assert_eq!(client.iter().sum::<i32>(), 6);
    }
}
