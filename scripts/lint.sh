#!/usr/bin/env bash
# The checks a change passes besides its tests, each failing the script when it fails:
# - cargo deny: every dependency's license allowed, no banned crate, crates.io only (deny.toml;
#   the advisories check needs the RustSec database from GitHub and is left to machines that
#   reach it: `cargo deny check advisories`);
# - clippy on every target with warnings as errors;
# - the API docs with every rustdoc warning an error;
# - cargo hack: each crate that has features (four libraries and the program) built alone with
#   each feature alone, and with none, the `cfg` combinations `--all-features` never builds
#   (all of them at once is clippy's build);
# - the guide (scripts/guide.sh).
# Installs cargo-deny and cargo-hack when they are missing.
#
# `--no-clippy` leaves clippy out, for a caller whose build ran it already: CI builds the tests
# through clippy-driver (.ci/run), and runs this script beside the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

clippy=true
for arg in "$@"; do
    case "$arg" in
        --no-clippy) clippy=false ;;
        *) echo "usage: scripts/lint.sh [--no-clippy]" >&2; exit 2 ;;
    esac
done

say() { printf '==> %s\n' "$*" >&2; }

# cargo install puts tools in $CARGO_HOME/bin, which may not be on this shell's PATH yet.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
# A debug build: cargo-deny's release build (fat LTO, one codegen unit) took 5.6 minutes on two
# cores, its debug build 51 s, and a check with it 2.1 s instead of 0.8.
install_tool() {
    local tool=$1 version=$2
    if ! command -v "$tool" >/dev/null 2>&1; then
        say "installing $tool (a debug build, for these checks)"
        cargo install --locked --debug "$tool" --version "$version"
    fi
}
install_tool cargo-deny '^0.20'
install_tool cargo-hack '^0.6'

say "cargo deny: licenses, bans, sources"
cargo deny check --hide-inclusion-graph licenses bans sources

if $clippy; then
    say "clippy"
    cargo clippy --workspace --all-targets --all-features -- -D warnings
fi

say "API docs"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps

# The crates that have features (four libraries and the program): each built alone with each
# feature alone, and with none. `full` (every broker) and `rabbitmq` (another name for `amqp`)
# make no combination of their own, and all features at once is clippy's build, which also
# covers the crates without features (one configuration each).
# A warning fails the run too (a function only some features use, say), found in the output
# rather than by RUSTFLAGS, which would build every dependency again.
say "cargo hack: each feature alone"
hack_log=$(mktemp)
cargo hack check --each-feature --exclude-all-features --exclude-features full,rabbitmq \
    -p guestlist -p guestlist-sqlx -p guestlist-http -p guestlist-carry -p guestlist-cli \
    2>&1 | tee "$hack_log"
if grep -E '^warning: .* generated [0-9]+ warnings?' "$hack_log"; then
    echo "cargo hack: the feature combinations above have warnings" >&2
    exit 1
fi
rm -f "$hack_log"

scripts/guide.sh
