#!/usr/bin/env bash
# Runs every test: starts (and on a fresh Debian machine installs) the databases the suite
# talks to, then runs the whole workspace's tests and doctests against them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh

ensure_postgres
ensure_mariadb
ensure_redis
ensure_nats
ensure_rabbitmq
ensure_kafka
ensure_sqs

# librdkafka (under the Kafka crate) is built from source: it needs a C compiler and make.
command -v make >/dev/null || apt_install make
command -v cc >/dev/null || apt_install gcc

if ! cargo nextest --version >/dev/null 2>&1; then
    # nextest runs each test in its own process with a timeout (.config/nextest.toml), so a
    # hung lock fails one test instead of hanging the run.
    say "installing cargo-nextest"
    cargo install --locked cargo-nextest
fi
cargo nextest run --workspace --all-features --no-fail-fast "$@"
cargo test --workspace --all-features --doc
