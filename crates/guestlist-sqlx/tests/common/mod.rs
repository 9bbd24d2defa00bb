//! The inbox suite, run against every backend by [`inbox_suite!`], so that no backend can
//! quietly differ.

#![allow(dead_code)] // each test binary uses the parts its backend needs
#![allow(unreachable_pub)] // a test crate has no public API

pub mod claims;
pub mod dead;
pub mod faults;
pub mod harness;
pub mod outbox;
pub mod protocol;
pub mod retention;
pub mod retries;
pub mod schema;
pub mod steps;
pub mod steps_batch;
pub mod steps_changed_hands;

/// Generates one `#[tokio::test]` per story in [`claims`], [`retention`], [`schema`],
/// [`protocol`] and [`retries`] for the backend `$db`.
#[macro_export]
macro_rules! inbox_suite {
    ($db:ty) => {
        guestlist_testkit::stories!(common::claims, [$db], ("");
            five_deliveries_five_acks_one_pick_task,
            a_second_event_id_makes_a_second_pick_task,
            each_handler_runs_once_per_event,
            rollback_releases_the_claim,
            a_failing_handler_rolls_back_its_claim,
            sixteen_connections_race_one_wins,
            sigkill_after_work_before_commit_redelivery_runs_once,
            batch_counts_repeats_once_and_skips_seen_ids,
            overlapping_batches_in_opposite_orders_never_deadlock,
            a_holder_that_rolls_back_lets_exactly_one_waiter_run,
            a_claim_outside_a_transaction_is_refused,
            a_claim_on_the_handlers_transaction_needs_a_lock_to_guard_it,
            the_work_carries_its_message_key_downstream,
        );
        guestlist_testkit::stories!(common::retention, [$db], ("");
            purge_removes_only_rows_older_than_retention,
            a_row_written_old_during_a_purge_is_purged_too,
            claims_succeed_while_a_million_rows_are_purged,
            purger_task_purges_in_the_background,
            stats_count_each_handlers_rows_and_the_oldest,
            claims_and_purged_rows_are_counted_in_metrics,
            a_cancelled_purge_releases_its_lock,
            a_retention_shorter_than_the_horizon_is_refused_at_start_up,
            old_idempotency_keys_are_purged_and_young_ones_stay,
        );
        guestlist_testkit::stories!(common::dead, [$db], ("");
            incoming_dead_letters_are_recorded_newest_first_and_counted,
            dead_letters_keep_their_message_and_group_by_failure,
            activity_per_minute_reads_the_tables_timestamps,
        );
        guestlist_testkit::stories!(common::schema, [$db], ("");
            bad_ids_and_table_names_get_errors_that_say_what_to_do,
            ids_compare_byte_for_byte,
            a_narrow_column_errors_instead_of_truncating,
            a_missing_table_says_to_migrate,
            concurrent_migrations_all_succeed,
            an_applications_schema_steps_take_turns,
        );
        guestlist_testkit::stories!(common::steps, [$db], ("");
            a_run_cut_after_two_steps_resumes_after_them,
            a_renamed_step_stops_with_both_names,
            a_run_past_its_lease_is_taken_over_and_journals_nothing,
            a_journal_left_mid_steps_is_purged_after_the_retention,
        );
        guestlist_testkit::stories!(common::steps_batch, [$db], ("");
            a_batchs_steps_journaled_together_run_once_and_fail_alone,
            a_failed_database_step_in_a_batch_rolls_back_alone,
            a_database_step_cut_mid_write_in_a_batch_commits_nothing_of_it,
            a_run_of_a_batch_taken_over_commits_nothing,
            a_message_handled_elsewhere_mid_steps_commits_no_final_work,
            a_slow_run_of_a_batch_keeps_its_lease_renewed,
        );
        guestlist_testkit::stories!(common::steps_changed_hands, [$db], ("");
            a_run_taken_over_mid_write_commits_nothing,
            a_message_handled_elsewhere_mid_steps_alone_commits_no_final_work,
        );
        guestlist_testkit::stories!(common::protocol, [$db], ("");
            the_key_statements_do_what_the_protocol_allows,
        );
        guestlist_testkit::stories!(common::retries, [$db], ("");
            a_deadlock_in_the_work_is_retried,
            a_bare_claim_in_a_transaction_is_retried_after_a_deadlock,
            generic_work_runs_on_every_database,
            sixteen_writers_on_deferred_transactions_are_told_what_to_call,
        );

        /// Not a test on its own: the child process that `sigkill_after_work_before_commit…`
        /// starts and kills.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "child process of sigkill_after_work_before_commit_redelivery_runs_once"]
        async fn sigkill_child() {
            common::claims::sigkill_child::<$db>().await;
        }
    };
}

/// Generates one `#[tokio::test]` per story in [`faults`] for the backend `$db`, which must
/// have a wire (PostgreSQL, MariaDB/MySQL) for the fault proxy to sit on.
#[macro_export]
macro_rules! wire_faults_suite {
    ($db:ty) => {
        mod faults {
            use super::common;
            guestlist_testkit::stories!(common::faults, [$db], ("faults_");
                an_ambiguous_commit_of_process_ends_in_one_effect,
                an_ambiguous_commit_of_a_batch_ends_in_one_effect_per_id,
            );
        }
    };
}

/// Generates one `#[tokio::test]` per story in [`outbox`] for the backend `$db`.
#[macro_export]
macro_rules! outbox_suite {
    ($db:ty) => {
        mod outbox {
            use super::common;
            guestlist_testkit::stories!(common::outbox, [$db], ("outbox_");
                a_rolled_back_write_enqueues_nothing,
                an_enqueue_outside_a_transaction_is_refused,
                an_id_enqueued_twice_is_added_once,
                a_keys_messages_take_their_places_in_commit_order,
                published_messages_are_purged_and_pending_ones_stay,
                rows_carry_their_slot_and_the_shard_count_changes_under_every_lease,
                a_table_made_before_shards_is_upgraded_to_one_shard,
            );
        }
    };
}
