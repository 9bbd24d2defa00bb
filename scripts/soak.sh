#!/usr/bin/env bash
# The soak rig by hand: the warehouse system as separate processes under overlapping faults
# for as long as asked, then checked against its recorded history (the tests chapter's "Soak").
#
#   scripts/soak.sh --minutes 60 --broker nats [--seed N] [--report soak.json]
#
# Starts the servers it needs (scripts/services.sh), builds the rig as the tests do, and
# prints the seed first: --seed N replays a run's faults.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh

minutes=15 broker=nats seed="" report=target/soak-report.json
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) minutes=$2; shift 2 ;;
        --broker) broker=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --report) report=$2; shift 2 ;;
        *) echo "usage: scripts/soak.sh [--minutes N] [--broker nats|rabbitmq|kafka|sqs] [--seed N] [--report PATH]" >&2; exit 2 ;;
    esac
done
case "$broker" in
    nats) ensure_nats ;;
    rabbitmq) ensure_rabbitmq ;;
    # The rig starts a Kafka (tansu) of its own, behind its broker link's proxy.
    kafka) ensure_kafka ;;
    sqs) ensure_sqs ;;
    *) echo "--broker $broker: the rig runs on nats, rabbitmq, kafka or sqs" >&2; exit 2 ;;
esac
ensure_postgres
ensure_build_tools
mkdir -p "$(dirname "$report")"

GUESTLIST_SOAK_SECONDS=$((minutes * 60)) GUESTLIST_SOAK_BROKER=$broker \
    GUESTLIST_SOAK_SEED=$seed GUESTLIST_SOAK_REPORT=$(realpath -m "$report") \
    cargo nextest run --profile soak -p warehouse-example --test soak --run-ignored all --no-capture
say "report in $report"
