# The two commands a newcomer needs: `make dev` (run everything locally) and `make test`.
# Both install what they need (a project-local Python virtualenv with pinned moto server and
# cargo-lambda; Java 17 and AWS's DynamoDB Local from npm) on a machine with Rust, Python 3 and Node.

SHELL := /bin/bash
.DEFAULT_GOAL := help

MOTO_PORT ?= 5050
DYNAMODB_PORT ?= 8000
DEV_PORT ?= 3000
RUNNER_PORT ?= 3001
LOCAL_STACK_PREFIX ?= local-
FUNCTION ?= meetings
WATCH_PORT ?= 9000

# Every Rust function's package (the Python tool sandbox has no Cargo.toml).
FUNCTION_PACKAGES = $(foreach manifest,$(wildcard functions/*/Cargo.toml),-p $(shell sed -n 's/^name = "\(.*\)"/\1/p' $(manifest) | head -1))

# Every binary of the workspace, the function binaries that Lambda mode runs among them. For the
# tests, with the tests' own build (`--tests`: one feature resolution, so `cargo test` then
# compiles nothing more). Not --quiet: a first build takes minutes, and cargo's progress bar
# (its "Compiling" lines off a terminal) says how far it is.
BUILD_BINARIES = cargo build --workspace --bins

# The environment of a process talking to the `make dev` stack.
LOCAL_AWS_ENV = AWS_ENDPOINT_URL=http://127.0.0.1:$(MOTO_PORT) AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$(DYNAMODB_PORT) \
	AWS_REGION=us-east-1 \
	AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing LOCAL_STACK_PREFIX=$(LOCAL_STACK_PREFIX)

.PHONY: help dev trace-viewer dev-lambda test test-lambda test-interop test-browser test-localstack test-contract fuzz admin watch lint template-check bench load build deploy pin-python clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

# Each run's trace as a tree on the dev server's output, unless an OTLP endpoint is given
# (OTEL_EXPORTER_OTLP_ENDPOINT, e.g. infra/scripts/trace-viewer's): docs/tracing.md.
DEV_TRACES = OTEL_TRACES_EXPORTER=$${OTEL_TRACES_EXPORTER:-$$([ -n "$${OTEL_EXPORTER_OTLP_ENDPOINT-}$${OTEL_EXPORTER_OTLP_TRACES_ENDPOINT-}" ] && echo otlp || echo console)}

dev: ## Run the whole system locally: DynamoDB Local + moto, tables, demo data, the APIs on :$(DEV_PORT), the runner on :$(RUNNER_PORT)
	MOTO_PORT=$(MOTO_PORT) DYNAMODB_PORT=$(DYNAMODB_PORT) DEV_PORT=$(DEV_PORT) RUNNER_PORT=$(RUNNER_PORT) LOCAL_STACK_PREFIX=$(LOCAL_STACK_PREFIX) \
		WebhookAllowedHosts=$${WebhookAllowedHosts-127.0.0.1,localhost} \
		OutboundAllowedHosts=$${OutboundAllowedHosts-127.0.0.0/8,::1,localhost} \
		$(DEV_TRACES) infra/scripts/with-local-aws cargo run -p dev-server

trace-viewer: ## A local trace viewer (trace-view from PyPI) on :4318; run make dev with OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318
	infra/scripts/trace-viewer

dev-lambda: ## As make dev, each function its own binary under cargo lambda watch, fed the events AWS sends (docs/local-stack.md)
	infra/scripts/ensure-venv local
	$(BUILD_BINARIES)
	MOTO_PORT=$(MOTO_PORT) DYNAMODB_PORT=$(DYNAMODB_PORT) DEV_PORT=$(DEV_PORT) RUNNER_PORT=$(RUNNER_PORT) LOCAL_STACK_PREFIX=$(LOCAL_STACK_PREFIX) \
		WebhookAllowedHosts=$${WebhookAllowedHosts-127.0.0.1,localhost} \
		OutboundAllowedHosts=$${OutboundAllowedHosts-127.0.0.0/8,::1,localhost} \
		$(DEV_TRACES) infra/scripts/with-local-aws $${CARGO_TARGET_DIR:-target}/debug/dev-server lambda

# The function binaries first: tests/api/lambda_mode.rs runs them under cargo lambda watch. The
# suite records each function's AWS calls; the IAM test then checks them against the template's
# policies (tests/iam, docs/local-stack.md).
test: ## Run every test against a fresh DynamoDB Local + moto, then check IAM against the calls they made
	$(BUILD_BINARIES) --tests
	rm -rf $${CARGO_TARGET_DIR:-target}/tmp/iam-calls
	infra/scripts/with-local-aws cargo test --workspace
	cargo test --quiet --test iam -- --ignored

test-lambda: ## Run only the Lambda-mode tests: every template route through its function binary under cargo lambda watch
	$(BUILD_BINARIES) --tests
	infra/scripts/with-local-aws cargo test --workspace --test api lambda_mode

test-interop: ## Run the flowtool tests against a real Langflow (installs .venv-langflow, ~1.8 GB, first time; --workspace: the build make test made)
	infra/scripts/with-langflow infra/scripts/with-local-aws cargo test --workspace --test api interop_langflow

# The tests whose AWS calls are SQS's and Secrets Manager's: the queues, the workers, the secrets,
# and Lambda mode's event source mapping (deletes, redrive); and S3's: recording uploads and their
# presigned downloads, whose signature and expiry LocalStack checks (moto checks neither).
LOCALSTACK_TESTS = queued_runs:: webhooks:: schedules:: pepper_rotation:: stack_drift:: runner_service:: cancel:: \
	language_models:: mcps:: tools:: lambda_mode::the_event_source_mapping lambda_mode::a_message_whose_function \
	recording_files::

test-browser: ## Run the browser tests in headless Chromium: a page of another origin reads a streamed run with fetch; the reference pages render (installs Debian's chromium and infra/browser's playwright-core)
	infra/scripts/ensure-browser
	CHROMIUM=/usr/bin/chromium infra/scripts/with-local-aws cargo test --workspace --test api -- cors:: reference_pages::

test-localstack: ## Run the SQS, Secrets Manager and worker tests with LocalStack 4.9.2 in place of moto (installs .venv-localstack)
	LOCAL_AWS=localstack infra/scripts/with-local-aws cargo test --workspace --test api -- $(LOCALSTACK_TESTS)

test-contract: ## Validate the OpenAPI documents, fuzz every operation against the make dev stack (schemathesis, bounded), drive generated clients (installs .venv-contract)
	infra/scripts/contract ci

fuzz: ## As test-contract with 100 cases per operation, a random seed and stateful sequences: make fuzz CONTRACT_EXAMPLES=500
	infra/scripts/contract fuzz

admin: ## Run the admin CLI against the `make dev` stack: make admin ARGS="app list"
	@$(LOCAL_AWS_ENV) cargo run --quiet -p admin -- $(ARGS)

watch: ## Run one function under `cargo lambda watch` against the `make dev` stack: make watch FUNCTION=auth
	infra/scripts/ensure-venv local
	eval "$$(cargo run --quiet -p dev-server -- env $(FUNCTION))" && $(LOCAL_AWS_ENV) \
		.venv/bin/cargo-lambda lambda watch --bin $(FUNCTION) --invoke-address 127.0.0.1 --invoke-port $(WATCH_PORT)

lint: ## Format and lint checks, and one version of each crate linked into a function (as CI runs them)
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	infra/scripts/check-duplicate-crates

TRANSFORMED_DIR = $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR),$(CURDIR)/target)/tmp

# SAM's own transform (offline) writes the template as CloudFormation will read it; the route
# test (tests/template) checks every spec route on it.
template-check: ## Validate template.yaml (sam validate --lint, cfn-lint) and check its routes as SAM's transform writes them
	infra/scripts/ensure-venv deploy
	AWS_DEFAULT_REGION=us-east-1 SAM_CLI_TELEMETRY=0 .venv-deploy/bin/sam validate --lint --template template.yaml
	.venv-deploy/bin/cfn-lint template.yaml
	mkdir -p $(TRANSFORMED_DIR)
	.venv-deploy/bin/python infra/scripts/sam-transform.py template.yaml > $(TRANSFORMED_DIR)/template.transformed.json
	TRANSFORMED_TEMPLATE=$(TRANSFORMED_DIR)/template.transformed.json cargo test --quiet --test template -- --ignored

# The cold-start figures are of binaries linked as Lambda's are (.cargo/config.toml: no PIE),
# built for this machine with --target, so build scripts and proc macros keep the default.
HOST_TARGET = $(shell rustc -vV | sed -n 's/^host: //p')
BENCH_BINARIES = $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR),target)/$(HOST_TARGET)/release

bench: ## Print warm-path, cold-start and init-instruction figures (release builds, a fresh DynamoDB Local + moto; docs/performance.md)
	@echo "==> building every function and bare-lambda for release (LTO: about 20 minutes the first time on 2 cores)"
	RUSTFLAGS="-C relocation-model=static" cargo build --release --target $(HOST_TARGET) $(FUNCTION_PACKAGES) -p bare-lambda
	COLD_START_BINARIES=$(BENCH_BINARIES) infra/scripts/with-local-aws bash -c 'cargo run --profile bench --quiet -p benches --bin benches && \
		cargo run --profile bench --quiet -p benches --bin cold-start'
	INIT_BINARIES=$(BENCH_BINARIES) benches/init-instructions

load: ## Load-test the running `make dev`: requests/s, p50 and p99 per scenario (docs/performance.md)
	cargo run --profile bench --quiet -p benches --bin load

build: ## Build every function for Lambda (arm64) with SAM and cargo-lambda
	infra/scripts/ensure-venv local
	infra/scripts/ensure-venv deploy
	PATH="$(CURDIR)/.venv/bin:$$PATH" SAM_CLI_TELEMETRY=0 .venv-deploy/bin/sam build

deploy: build ## Deploy to AWS with the normal AWS environment (first time: guided)
	SAM_CLI_TELEMETRY=0 .venv-deploy/bin/sam deploy --guided

pin-python: ## Regenerate every infra/python/requirements-*.lock (all packages ==, hashed) from its requirements-*.txt: make pin-python [PIN_ARGS=--upgrade]
	infra/scripts/pin-python $(PIN_ARGS)

clean: ## Remove build output and virtualenvs
	cargo clean
	rm -rf .venv .venv-deploy .venv-langflow .venv-localstack .venv-contract .venv-pin .aws-sam .local
