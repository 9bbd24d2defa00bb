#!/usr/bin/env bash
# Runs every test: starts (and on a fresh Debian machine installs) the databases the suite
# talks to, then runs the whole workspace's tests and doctests against them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh

ensure_postgres
ensure_mariadb

if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --all-features --no-fail-fast "$@"
else
    say "cargo-nextest is not installed; running the suite with cargo test"
    cargo test --workspace --all-features --no-fail-fast --tests "$@"
fi
cargo test --workspace --all-features --doc
