//! Creating the template's tables, secrets and queues on a local AWS endpoint (moto, LocalStack).

use crate::physical_name;
use crate::template::{KeySchema, TableSpec, Template};
use aws_env::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TimeToLiveSpecification,
};
use base64::Engine as _;

/// Creating a resource on the local endpoint failed.
#[derive(Debug, thiserror::Error)]
#[error("bootstrap {resource}: {message}")]
pub struct BootstrapError {
    resource: String,
    message: String,
}

impl BootstrapError {
    fn new(resource: &str, err: impl std::fmt::Display) -> Self {
        Self { resource: resource.to_owned(), message: err.to_string() }
    }
}

/// Creates every table (with its indexes and TTL) and every secret the template declares, named
/// `{prefix}{LogicalId}`. Secrets get random material, except those an operator sets, which are
/// created without a value as in AWS. Safe to run against a fresh endpoint only:
/// existing resources are an error, so two stacks never share a name by accident.
pub async fn bootstrap(sdk: &SdkConfig, template: &Template, prefix: &str) -> Result<(), BootstrapError> {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let secrets = aws_sdk_secretsmanager::Client::new(sdk);
    for table in &template.tables {
        create_table(&dynamodb, table, prefix).await?;
    }
    create_queues(sdk, template, prefix).await?;
    for logical_id in &template.secrets {
        if template.secrets_set_by_operator.contains(logical_id) {
            secrets.create_secret().name(physical_name(prefix, logical_id)).send().await.map_err(|err| {
                BootstrapError::new(logical_id, aws_sdk_secretsmanager::error::DisplayErrorContext(err))
            })?;
            continue;
        }
        let mut material = [0u8; 48];
        getrandom::fill(&mut material).map_err(|err| BootstrapError::new(logical_id, err))?;
        secrets
            .create_secret()
            .name(physical_name(prefix, logical_id))
            .secret_string(base64::engine::general_purpose::STANDARD_NO_PAD.encode(material))
            .send()
            .await
            .map_err(|err| BootstrapError::new(logical_id, aws_sdk_secretsmanager::error::DisplayErrorContext(err)))?;
    }
    Ok(())
}

async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    table: &TableSpec,
    prefix: &str,
) -> Result<(), BootstrapError> {
    let name = physical_name(prefix, &table.logical_id);
    let fail = |err: &dyn std::fmt::Display| BootstrapError::new(&table.logical_id, err);
    let mut request = client.create_table().table_name(&name).billing_mode(BillingMode::PayPerRequest);
    for (attribute, kind) in &table.attributes {
        request = request.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(attribute)
                .attribute_type(ScalarAttributeType::from(kind.as_str()))
                .build()
                .map_err(|e| fail(&e))?,
        );
    }
    request = request.set_key_schema(Some(key_schema(&table.key).map_err(|e| fail(&e))?));
    for index in &table.indexes {
        let projection = Projection::builder()
            .projection_type(ProjectionType::from(index.projection.as_str()))
            .set_non_key_attributes((!index.non_key_attributes.is_empty()).then(|| index.non_key_attributes.clone()))
            .build();
        request = request.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(&index.name)
                .set_key_schema(Some(key_schema(&index.key).map_err(|e| fail(&e))?))
                .projection(projection)
                .build()
                .map_err(|e| fail(&e))?,
        );
    }
    request.send().await.map_err(|err| fail(&aws_sdk_dynamodb::error::DisplayErrorContext(err)))?;
    if let Some(attribute) = &table.ttl_attribute {
        client
            .update_time_to_live()
            .table_name(&name)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .attribute_name(attribute)
                    .enabled(true)
                    .build()
                    .map_err(|e| fail(&e))?,
            )
            .send()
            .await
            .map_err(|err| fail(&aws_sdk_dynamodb::error::DisplayErrorContext(err)))?;
    }
    Ok(())
}

fn key_schema(key: &KeySchema) -> Result<Vec<KeySchemaElement>, aws_sdk_dynamodb::error::BuildError> {
    let mut elements = vec![KeySchemaElement::builder().attribute_name(&key.hash).key_type(KeyType::Hash).build()?];
    if let Some(range) = &key.range {
        elements.push(KeySchemaElement::builder().attribute_name(range).key_type(KeyType::Range).build()?);
    }
    Ok(elements)
}

/// Creates every queue, then points each at its dead-letter queue (which needs its ARN).
async fn create_queues(sdk: &SdkConfig, template: &Template, prefix: &str) -> Result<(), BootstrapError> {
    use aws_sdk_sqs::types::QueueAttributeName;
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let mut urls = std::collections::HashMap::new();
    for queue in &template.queues {
        let fail = |err: &dyn std::fmt::Display| BootstrapError::new(&queue.logical_id, err);
        let mut request = sqs.create_queue().queue_name(physical_name(prefix, &queue.logical_id));
        if let Some(seconds) = queue.visibility_timeout {
            request = request.attributes(QueueAttributeName::VisibilityTimeout, seconds.to_string());
        }
        if let Some(seconds) = queue.message_retention {
            request = request.attributes(QueueAttributeName::MessageRetentionPeriod, seconds.to_string());
        }
        let output = request.send().await.map_err(|err| fail(&aws_sdk_sqs::error::DisplayErrorContext(err)))?;
        urls.insert(queue.logical_id.clone(), output.queue_url.unwrap_or_default());
    }
    for queue in &template.queues {
        let Some((target, max_receive)) = &queue.dead_letter else { continue };
        let fail = |err: &dyn std::fmt::Display| BootstrapError::new(&queue.logical_id, err);
        let target_url =
            urls.get(target).ok_or_else(|| fail(&format!("dead-letter queue {target} is not declared")))?;
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(target_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|err| fail(&aws_sdk_sqs::error::DisplayErrorContext(err)))?;
        let arn = attributes.attributes.and_then(|mut a| a.remove(&QueueAttributeName::QueueArn)).unwrap_or_default();
        let policy = format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"{max_receive}"}}"#);
        sqs.set_queue_attributes()
            .queue_url(urls.get(&queue.logical_id).cloned().unwrap_or_default())
            .attributes(QueueAttributeName::RedrivePolicy, policy)
            .send()
            .await
            .map_err(|err| fail(&aws_sdk_sqs::error::DisplayErrorContext(err)))?;
    }
    Ok(())
}
