#!/usr/bin/env bash
# Builds the guide (docs/guide) with mdBook, installing mdBook when it is missing. Fails on any
# error: a chapter listed in SUMMARY.md but missing (book.toml sets create-missing = false), and
# the errors mdBook only logs and builds past, such as an include whose file is gone.
# The guide's Rust snippets are compiled as doctests of the guestlist crate and its links checked
# by crates/guestlist/tests/guide.rs; both run with scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '==> %s\n' "$*" >&2; }

if ! command -v mdbook >/dev/null 2>&1; then
    say "installing mdbook"
    # A debug build: it builds in a fraction of a release build's time, and runs in seconds.
    # Without `serve` and `watch` (a web server and a file watcher this script never runs):
    # 140 crates to build instead of 201.
    cargo install --locked --debug mdbook --version '^0.4' --no-default-features --features search
    # cargo install puts it in $CARGO_HOME/bin, which may not be on this shell's PATH yet.
    export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
case "$(mdbook --version)" in
    "mdbook v0.4."*) ;;
    *) say "warning: $(mdbook --version) is not mdBook 0.4, which the guide is written for" ;;
esac

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
mdbook build docs/guide "$@" 2>&1 | tee "$log"
if grep -q '\[ERROR\]' "$log"; then
    say "mdbook reported errors (above); the guide is not ready"
    exit 1
fi
say "the guide is in docs/guide/book/index.html"
