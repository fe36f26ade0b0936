//! The span sink of the functions that execute runs: `trace-export`'s exporter configured from
//! the `OTEL_*` settings (docs/tracing.md), signing with the function's own credentials.

use agent_runtime::trace::SpanSink;
use aws_env::settings::Lookup;
use futures_util::future::BoxFuture;
use std::sync::Arc;
use telemetry::Recorder;
use trace_export::{AwsIdentity, Exporter};

#[derive(Debug)]
struct Exported(Exporter);

impl SpanSink for Exported {
    fn export<'a>(&'a self, recorder: &'a Recorder) -> BoxFuture<'a, ()> {
        Box::pin(self.0.export(recorder))
    }

    fn captures_content(&self) -> bool {
        self.0.captures_content()
    }
}

/// Where runs' spans go, or none when the settings send them nowhere (then nothing is recorded).
/// Builds no connection: the first export does.
pub fn span_sink(aws: &aws_env::Clients, lookup: Lookup) -> Option<Arc<dyn SpanSink>> {
    let config = aws.config();
    let identity = config
        .credentials_provider()
        .zip(config.region())
        .map(|(credentials, region)| AwsIdentity { credentials, region: region.to_string() });
    let service = lookup("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|| "agent-platform".to_owned());
    let exporter = Exporter::from_settings(lookup, &service, identity);
    exporter.is_on().then(|| Arc::new(Exported(exporter)) as Arc<dyn SpanSink>)
}
