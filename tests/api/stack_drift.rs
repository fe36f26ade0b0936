//! The local stack is what `template.yaml` declares, and the code agrees with both.

use integration_tests::TestStack;
use meeting_data::store::meetings::BY_ORGANIZATION_INDEX;
use stack::{KeySchema, Template};

fn key(hash: &str, range: Option<&str>) -> KeySchema {
    KeySchema { hash: hash.into(), range: range.map(Into::into) }
}

#[tokio::test]
async fn bootstrapped_tables_match_the_template() {
    let stack = TestStack::new().await;
    let template = Template::embedded().unwrap();
    for table in &template.tables {
        let described = stack
            .dynamodb
            .describe_table()
            .table_name(format!("{}{}", stack.prefix, table.logical_id))
            .send()
            .await
            .unwrap()
            .table
            .unwrap();
        let schema = |elements: &[aws_sdk_dynamodb::types::KeySchemaElement]| KeySchema {
            hash: elements.iter().find(|e| e.key_type.as_str() == "HASH").unwrap().attribute_name.clone(),
            range: elements.iter().find(|e| e.key_type.as_str() == "RANGE").map(|e| e.attribute_name.clone()),
        };
        assert_eq!(schema(described.key_schema()), table.key, "{}", table.logical_id);
        let mut indexes: Vec<(String, KeySchema, String, Vec<String>)> = described
            .global_secondary_indexes()
            .iter()
            .map(|index| {
                let projection = index.projection.as_ref().unwrap();
                let mut non_key = projection.non_key_attributes().to_vec();
                non_key.sort();
                (
                    index.index_name.clone().unwrap(),
                    schema(index.key_schema()),
                    projection.projection_type.as_ref().unwrap().as_str().to_owned(),
                    non_key,
                )
            })
            .collect();
        indexes.sort();
        let mut declared: Vec<(String, KeySchema, String, Vec<String>)> = table
            .indexes
            .iter()
            .map(|index| {
                let mut non_key = index.non_key_attributes.clone();
                non_key.sort();
                (index.name.clone(), index.key.clone(), index.projection.clone(), non_key)
            })
            .collect();
        declared.sort();
        assert_eq!(indexes, declared, "{}", table.logical_id);

        let ttl = stack
            .dynamodb
            .describe_time_to_live()
            .table_name(format!("{}{}", stack.prefix, table.logical_id))
            .send()
            .await
            .unwrap()
            .time_to_live_description
            .and_then(|d| d.attribute_name);
        assert_eq!(ttl, table.ttl_attribute, "{}", table.logical_id);
    }
}

#[test]
fn storage_key_schemes_match_the_template() {
    let template = Template::embedded().unwrap();
    assert_eq!(template.table("MeetingsTable").unwrap().key, key("pk", Some("sk")));
    assert_eq!(template.table("DirectoryTable").unwrap().key, key("pk", Some("sk")));
    assert_eq!(template.table("ExternalAppsTable").unwrap().key, key("client_id", None));
    let tokens = template.table("AccessTokensTable").unwrap();
    assert_eq!(tokens.key, key("token_hash", None));
    assert_eq!(tokens.ttl_attribute.as_deref(), Some("expires_at"));

    let index =
        template.table("MeetingsTable").unwrap().indexes.iter().find(|i| i.name == BY_ORGANIZATION_INDEX).unwrap();
    assert_eq!(index.key, key("org_id", Some("list_sort")));
    // Every attribute the list reads from the index must be projected.
    for attribute in ["id", "title", "created_at", "updated_at", "summary_complete", "from_calendar", "participant_ids"]
    {
        assert!(index.non_key_attributes.iter().any(|a| a == attribute), "{attribute} not projected");
    }
}

#[tokio::test]
async fn each_function_starts_with_exactly_the_environment_the_template_gives_it() {
    let stack = TestStack::new().await;
    let template = Template::embedded().unwrap();
    let env_of = |logical_id: &str| template.environment(template.function(logical_id).unwrap(), &stack.prefix);
    let auth_env = env_of("AuthFunction");
    let meetings_env = env_of("MeetingsFunction");
    meeting_api::AuthService::from_settings(&stack.aws(), &|name: &str| auth_env.get(name).cloned()).unwrap();
    meeting_api::MeetingsService::from_settings(&stack.aws(), &|name: &str| meetings_env.get(name).cloned()).unwrap();
    assert_eq!(auth_env["ACCESS_TOKEN_TTL_SECONDS"], "10800");
    assert_eq!(template.function("AuthFunction").unwrap().binary, "auth");
    assert_eq!(template.function("MeetingsFunction").unwrap().binary, "meetings");
}

#[test]
fn functions_name_tables_and_secrets_by_the_one_convention() {
    let template = Template::embedded().unwrap();
    for function in &template.functions {
        for (variable, value) in &function.environment {
            if let stack::EnvValue::Ref(target) = value
                && !template.parameters.contains_key(target)
            {
                assert_eq!(*variable, template.resource_variable(target), "{}", function.logical_id);
            }
        }
    }
    assert_eq!(template.resource_variable("ExternalAppsTable"), meeting_data::settings::EXTERNAL_APPS_TABLE);
    assert_eq!(template.resource_variable("DirectoryTable"), meeting_data::settings::DIRECTORY_TABLE);
    assert_eq!(template.resource_variable("PepperSecret"), meeting_data::settings::PEPPER_SECRET_ID);
}

#[test]
fn the_health_check_probes_every_table_of_the_template() {
    let template = Template::embedded().unwrap();
    let mut declared: Vec<String> = template.tables.iter().map(|t| template.resource_variable(&t.logical_id)).collect();
    declared.sort();
    let mut probed: Vec<String> = platform_api::health::TABLE_VARIABLES.iter().map(|v| v.to_string()).collect();
    probed.sort();
    assert_eq!(probed, declared);
    let health = template.function("HealthFunction").unwrap();
    for variable in &declared {
        assert!(health.environment.contains_key(variable), "HealthFunction lacks {variable}");
    }
}

#[test]
fn the_openapi_documents_name_every_table_the_health_checks_report() {
    let variables: Vec<&str> = platform_api::health::TABLE_VARIABLES.to_vec();
    for (document, schema) in [("backend.json", "HealthTableCheck"), ("runner.json", "TableCheck")] {
        let path = format!("{}/../openapi/{document}", env!("CARGO_MANIFEST_DIR"));
        let document: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let listed = &document["components"]["schemas"][schema]["properties"]["table"]["enum"];
        assert_eq!(listed, &serde_json::json!(variables), "{path}: {schema}.table");
    }
}

#[tokio::test]
async fn bootstrapped_queues_match_the_template_and_the_worker_starts_with_its_environment() {
    let stack = TestStack::new().await;
    let template = Template::embedded().unwrap();
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let queue = template.queues.iter().find(|q| q.logical_id == "WebhookDeliveryQueue").unwrap();
    assert_eq!(queue.dead_letter, Some(("WebhookDeliveryDeadLetterQueue".to_owned(), 12)));
    let url = |logical_id: &str| {
        let sqs = sqs.clone();
        let name = format!("{}{logical_id}", stack.prefix);
        async move { sqs.get_queue_url().queue_name(name).send().await.unwrap().queue_url.unwrap() }
    };
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url("WebhookDeliveryQueue").await)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    use aws_sdk_sqs::types::QueueAttributeName as Name;
    assert_eq!(attributes[&Name::VisibilityTimeout], queue.visibility_timeout.unwrap().to_string());
    let redrive: serde_json::Value = serde_json::from_str(&attributes[&Name::RedrivePolicy]).unwrap();
    assert!(redrive["deadLetterTargetArn"].as_str().unwrap().ends_with("WebhookDeliveryDeadLetterQueue"));
    assert_eq!(redrive["maxReceiveCount"].to_string().trim_matches('"'), "12");

    // Every webhook-aware function builds its settings from what the template gives it.
    for function in ["WebhooksFunction", "WebhookDeliveryFunction", "AgentsFunction"] {
        let env = template.environment(template.function(function).unwrap(), &stack.prefix);
        platform_api::webhooks::WebhookSettings::from_settings(&stack.aws(), &|name: &str| env.get(name).cloned())
            .unwrap_or_else(|err| panic!("{function}: {err}"));
    }
    let deliveries = template.table("WebhookDeliveriesTable").unwrap();
    let index = |name: &str| deliveries.indexes.iter().find(|i| i.name == name).unwrap().key.clone();
    assert_eq!(index("by-endpoint"), key("endpoint_id", Some("sk")));
    assert_eq!(index("by-event"), key("event_id", Some("sk")));
    assert_eq!(template.resource_variable("WebhookDeliveryQueue"), platform_api::settings::WEBHOOK_DELIVERY_QUEUE_URL);
}

#[test]
fn the_run_limits_and_the_queue_wait_reach_the_functions_that_use_them() {
    let template = Template::embedded().unwrap();
    let env_of = |logical_id: &str| template.environment(template.function(logical_id).unwrap(), "stack-");
    for executes_runs in ["AgentRunsFunction", "RunnerFunction", "RunnerWorkerFunction"] {
        let env = env_of(executes_runs);
        let limits = platform_api::agent_runs::run_limits(&|name: &str| env.get(name).cloned()).unwrap();
        assert_eq!(limits, agent_runtime::engine::RunLimits::default(), "{executes_runs}");
        for name in ["RUN_MAX_TOOL_CALLS_PER_TURN", "RUN_TOOL_CALL_CONCURRENCY", "RUN_MAX_SUB_AGENT_CALLS"] {
            assert!(env.contains_key(name), "{executes_runs} lacks {name}");
        }
    }
    for queues_runs in ["RunnerFunction", "SchedulerFunction", "SchedulesFunction"] {
        let wait = env_of(queues_runs)[platform_api::settings::RUN_MAX_QUEUE_WAIT_SECONDS].clone();
        assert_eq!(wait, agent_runtime::lifecycle::DEFAULT_MAX_QUEUE_WAIT.as_secs().to_string(), "{queues_runs}");
    }
}

/// The stack starts again on an endpoint that kept it (a second `make dev` on DynamoDB Local or
/// LocalStack left running): what matches the template is kept, secrets keep their material, and
/// a table that differs stops the start naming each difference.
#[tokio::test]
async fn bootstrapping_again_keeps_what_matches_and_names_what_differs() {
    let stack = TestStack::new().await;
    let template = integration_tests::local_template();
    let secrets = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    let pepper = |secrets: aws_sdk_secretsmanager::Client, id: String| async move {
        secrets.get_secret_value().secret_id(id).send().await.unwrap().secret_string.unwrap()
    };
    let pepper_id = stack.setting("PEPPER_SECRET_ID");
    let before = pepper(secrets.clone(), pepper_id.clone()).await;
    stack::bootstrap(&stack.sdk, &template, &stack.prefix).await.expect("a second bootstrap keeps the stack");
    assert_eq!(pepper(secrets, pepper_id).await, before, "the pepper is kept");

    // A stack whose meetings table was made by hand with another key and no index.
    let prefix = format!("{}other-", stack.prefix);
    stack
        .dynamodb
        .create_table()
        .table_name(format!("{prefix}MeetingsTable"))
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::N)
                .build()
                .unwrap(),
        )
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let error = stack::bootstrap(&stack.sdk, &template, &prefix).await.expect_err("a table that differs").to_string();
    for expected in [
        "MeetingsTable",
        "differs from template.yaml",
        "key is",
        "attribute pk is not defined",
        &format!("index {BY_ORGANIZATION_INDEX} is missing"),
    ] {
        assert!(error.contains(expected), "{expected:?} missing from {error}");
    }
}
