#!/usr/bin/env bash
# Runs every test: starts (and on a fresh Debian machine installs) the databases the suite
# talks to, then runs the whole workspace's tests and doctests against them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh

ensure_services

ensure_build_tools
cargo nextest run --workspace --all-features --no-fail-fast "$@"
cargo test --workspace --all-features --doc
