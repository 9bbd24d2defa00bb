//! The macros that turn the broker suite's stories into tests, one module per broker and
//! database, and the one that runs a consumer or a relay until told to stop.

/// Runs a consumer (or a relay: anything with `run(shutdown)`) on a task until the returned
/// sender fires; the task returns what `run` returned.
#[macro_export]
macro_rules! run_until_stopped {
    ($consumer:expr) => {{
        let (stop, stopped) = ::tokio::sync::oneshot::channel::<()>();
        let consumer = $consumer;
        let task = ::tokio::spawn(async move {
            consumer
                .run(async move {
                    let _ = stopped.await;
                })
                .await
        });
        (stop, task)
    }};
}

/// Generates one `#[tokio::test]` per story in [`suite`](crate::brokers::suite) for the broker `$broker` with the store
/// `$db`, in module `$m`: one word whose first two letters differ from every other module's, since
/// they name the test's streams, queues and tables (and the child tests).
#[macro_export]
macro_rules! broker_suite {
    ($m:ident, $broker:ty, $db:ty) => {
        mod $m {
            // The caller's paths (its broker type, its `common` module) resolve as they would
            // beside the macro call.
            #[allow(unused_imports)]
            use super::*;
            use $crate::brokers::suite;
            $crate::stories!(suite, [$broker, $db], (stringify!($m), "_");
                five_publishes_five_acks_one_pick_task,
                a_poison_message_is_dead_lettered_while_the_rest_flow,
                a_messages_headers_reach_its_handler_and_stay_on_its_dead_letter,
                a_handled_message_delivered_past_the_limit_is_a_duplicate_not_poison,
                not_yet_is_deferred_and_never_counts_as_poison,
                deferrals_past_their_time_bound_are_dead_lettered,
                shutdown_mid_batch_loses_nothing,
                a_long_handler_keeps_its_delivery_alive,
                a_retention_shorter_than_the_redelivery_horizon_is_refused,
                ten_thousand_events_two_consumers_one_killed_again_and_again,
                a_missing_queue_is_refused_at_start_up,
                sigterm_mid_batch_finishes_the_batch_and_loses_nothing,
                sigkill_between_commit_and_acks_redelivers_a_batch_of_duplicates,
                a_missing_inbox_table_is_refused_at_start_and_dead_letters_nothing,
                a_deferral_inside_a_batch_waits_as_asked_and_counts_once,
                a_poison_in_a_batch_runs_once_per_delivery_and_each_run_is_counted,
                a_batch_ends_as_the_inboxs_own_batch_path_ends,
            );

            $crate::children!(suite, [$broker, $db];
                term_consumer: "child process of sigterm_mid_batch_finishes_the_batch_and_loses_nothing",
                held_acks_consumer: "child process of sigkill_between_commit_and_acks_redelivers_a_batch_of_duplicates",
                chaos_consumer: "child process of ten_thousand_events_two_consumers_one_killed_again_and_again",
            );
        }
    };
}

/// Generates the stories of incoming dead letters put back ([`suite`](crate::brokers::suite)'s
/// retries: a group from the library, from the program, from the console in Chromium, and a
/// retrier killed at each step) for the broker `$broker` with the store `$db`, in module `$m`
/// (named as for [`broker_suite!`]).
#[macro_export]
macro_rules! dead_letters_suite {
    ($m:ident, $broker:ty, $db:ty) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            use $crate::brokers::suite;
            $crate::stories!(suite, [$broker, $db], (stringify!($m), "_");
                a_group_of_dead_letters_retried_is_handled_once_each,
                a_retry_killed_at_each_step_loses_nothing_and_runs_once,
                the_program_retries_a_failure_group_once_confirmed,
                the_console_retries_a_failure_group_once_confirmed,
            );

            $crate::children!(suite, [$broker, $db];
                dead_retrier: "child process of a_retry_killed_at_each_step_loses_nothing_and_runs_once",
            );
        }
    };
}

/// Generates the keys stories ([`suite`](crate::brokers::suite)'s keys in parallel, each key in
/// order) for the broker `$broker` with the store `$db`, in module `$m` (named as for
/// [`broker_suite!`]).
#[macro_export]
macro_rules! keys_suite {
    ($m:ident, $broker:ty, $db:ty) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            use $crate::brokers::suite;
            $crate::stories!(suite, [$broker, $db], (stringify!($m), "_");
                keys_in_parallel_each_key_in_order,
                a_failing_key_and_a_deferring_key_hold_back_only_themselves,
                keys_through_a_consumer_killed_three_times_keep_their_order,
            );

            $crate::children!(suite, [$broker, $db];
                keys_consumer: "child process of keys_through_a_consumer_killed_three_times_keep_their_order",
            );
        }
    };
}

/// The stories of a broker that goes away (a proxy in front of it cuts every connection) and
/// comes back, under a consumer and under the relay, for the brokers a proxy can cut off
/// ([`Broker::open_behind_proxy`]).
///
/// [`Broker::open_behind_proxy`]: crate::brokers::Broker::open_behind_proxy
#[macro_export]
macro_rules! broker_away_suite {
    ($m:ident, $broker:ty) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_broker_cut_off_and_back_costs_no_event() {
                $crate::brokers::suite::the_broker_cut_off_and_back_costs_no_event::<$broker>(
                    concat!(stringify!($m), "_away"),
                    std::time::Duration::from_secs(5),
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_broker_cut_off_and_back_costs_the_relay_no_message_and_no_order() {
                $crate::brokers::relay::a_broker_cut_off_and_back_costs_no_message_and_no_order::<
                    $broker,
                >(
                    concat!(stringify!($m), "_relay_away"),
                    std::time::Duration::from_secs(5),
                )
                .await;
            }
        }
    };
}

/// Generates the stories of a fault between the consumer of `$broker` and its database, in module
/// `$m` (named as for [`broker_suite!`]), each through a [`FaultProxy`](crate::fault_proxy::FaultProxy):
/// the database goes away on PostgreSQL, with a 2 s pool acquire timeout and with sqlx's default
/// of 30 s; a PostgreSQL and a MariaDB of the test's own taken down the hard way and started
/// again; a commit's answer is lost, on PostgreSQL and on MariaDB; a key held back behind a
/// message that went back keeps its order through an outage.
#[macro_export]
macro_rules! outage_suite {
    ($m:ident, $broker:ty) => {
        mod $m {
            // The caller's paths (its broker type, its `common` module) resolve as they would
            // beside the macro call.
            #[allow(unused_imports)]
            use super::*;
            use std::time::Duration;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_database_outage_dead_letters_nothing_and_resumes() {
                $crate::brokers::suite::a_database_outage_dead_letters_nothing_and_resumes::<$broker>(
                    concat!(stringify!($m), "_short_acquire"),
                    Some(Duration::from_secs(2)),
                    Duration::from_secs(20),
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_database_outage_dead_letters_nothing_and_resumes_with_the_default_pool() {
                $crate::brokers::suite::a_database_outage_dead_letters_nothing_and_resumes::<$broker>(
                    concat!(stringify!($m), "_default_pool"),
                    None,
                    Duration::from_secs(40),
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_key_held_through_a_database_outage_keeps_its_order() {
                $crate::brokers::suite::a_key_held_through_a_database_outage_keeps_its_order::<
                    $broker,
                >(concat!(stringify!($m), "_held_key"))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_database_restarted_mid_stream_loses_and_doubles_nothing_on_postgres() {
                $crate::brokers::suite::a_database_restarted_mid_stream_loses_and_doubles_nothing::<
                    $broker,
                    $crate::private_postgres::PrivatePostgres,
                >(concat!(stringify!($m), "_restarted_pg"))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_database_restarted_mid_stream_loses_and_doubles_nothing_on_mariadb() {
                $crate::brokers::suite::a_database_restarted_mid_stream_loses_and_doubles_nothing::<
                    $broker,
                    $crate::private_mariadb::PrivateMariadb,
                >(concat!(stringify!($m), "_restarted_my"))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_consumer_told_to_stop_while_its_database_stalls_stops_within_its_grace() {
                $crate::brokers::suite::a_consumer_told_to_stop_while_its_database_stalls_stops_within_its_grace::<
                    $broker,
                    ::sqlx::Postgres,
                >(concat!(stringify!($m), "_stopstall"))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_ambiguous_commit_is_answered_by_the_redelivery_on_postgres() {
                $crate::brokers::suite::an_ambiguous_commit_is_answered_by_the_redelivery::<$broker, ::sqlx::Postgres>(
                    concat!(stringify!($m), "_ambiguous_pg"),
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_ambiguous_commit_is_answered_by_the_redelivery_on_mariadb() {
                $crate::brokers::suite::an_ambiguous_commit_is_answered_by_the_redelivery::<$broker, ::sqlx::MySql>(
                    concat!(stringify!($m), "_ambiguous_my"),
                )
                .await;
            }
        }
    };
}

/// Generates one `#[tokio::test]` per story in [`relay`](crate::brokers::relay) for the broker `$broker` with the
/// database `$db`, in module `$m` (named as for [`broker_suite!`]).
#[macro_export]
macro_rules! relay_suite {
    ($m:ident, $broker:ty, $db:ty) => {
        mod $m {
            // The caller's paths (its broker type, its `common` module) resolve as they would
            // beside the macro call.
            #[allow(unused_imports)]
            use super::*;
            use $crate::brokers::relay;
            $crate::stories!(relay, [$broker, $db], (stringify!($m), "_");
                a_rolled_back_write_publishes_nothing_a_committed_one_once,
                sigkill_between_confirm_and_stamp_publishes_again_without_a_second_effect,
                a_relay_that_lost_its_lease_stamps_nothing,
                two_relays_one_killed_again_and_again_keep_each_keys_order,
                a_message_no_queue_takes_stays_pending_and_shows_in_the_metrics,
            );
            $crate::relay_suite!(@every_broker $m, $broker, $db);

            $crate::children!(relay, [$broker, $db];
                chaos_relay: "child process of two_relays_one_killed_again_and_again_keep_each_keys_order",
            );
        }
    };
    // The refusals and the held relay, which every broker's suite runs as they are.
    (@every_broker $m:ident, $broker:ty, $db:ty) => {
        use $crate::brokers::relay as every_broker;
        $crate::stories!(every_broker, [$broker, $db], (stringify!($m), "_");
            a_refused_message_holds_back_its_own_key_and_the_rest_go_out_once,
            a_message_never_taken_is_dead_lettered_and_the_rest_go_out_once,
            a_round_that_outlasts_its_lease_stamps_what_was_confirmed,
            a_lease_that_ran_out_untaken_is_renewed_and_its_round_stamped,
            a_relay_starved_before_the_broker_sends_nothing_another_took,
            a_refused_messages_retries_back_off_doubling,
        );

        $crate::children!(every_broker, [$broker, $db];
            held_relay: "child process of the relay tests (the SIGKILL and SIGSTOP stories hold it mid-batch)",
        );
    };
}

/// Generates the story of four relays sharing an outbox's shards for the broker `$broker` with
/// the database `$db`, in module `$m` (named as for [`broker_suite!`]), and its relay child.
#[macro_export]
macro_rules! relay_shares_suite {
    ($m:ident, $broker:ty, $db:ty) => {
        mod $m {
            // The caller's paths (its broker type, its `common` module) resolve as they would
            // beside the macro call.
            #[allow(unused_imports)]
            use super::*;
            use $crate::brokers::relay;
            $crate::stories!(relay, [$broker, $db], (stringify!($m), "_");
                four_relays_share_the_shards_through_joins_kills_and_a_pause,
            );
            $crate::children!(relay, [$broker, $db];
                share_relay: "child process of four_relays_share_the_shards_through_joins_kills_and_a_pause",
            );
        }
    };
}

/// Generates the stories of a fault between the relay to `$broker` and its database, in module
/// `$m` (named as for [`broker_suite!`]), on PostgreSQL and on MariaDB, each through a
/// [`FaultProxy`](crate::fault_proxy::FaultProxy): a stamp's answer is lost; a relay's traffic
/// stalls past its lease; and, on a PostgreSQL and a MariaDB of the test's own, the database
/// taken down the hard way and started again.
#[macro_export]
macro_rules! relay_wire_suite {
    ($m:ident, $broker:ty) => {
        mod $m {
            // The caller's paths (its broker type, its `common` module) resolve as they would
            // beside the macro call.
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_database_restarted_mid_stream_costs_no_message_and_no_order_on_postgres() {
                $crate::brokers::relay::a_database_restarted_mid_stream_costs_no_message_and_no_order::<
                    $broker,
                    $crate::private_postgres::PrivatePostgres,
                >(concat!(stringify!($m), "_restarted_pg"))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_database_restarted_mid_stream_costs_no_message_and_no_order_on_mariadb() {
                $crate::brokers::relay::a_database_restarted_mid_stream_costs_no_message_and_no_order::<
                    $broker,
                    $crate::private_mariadb::PrivateMariadb,
                >(concat!(stringify!($m), "_restarted_my"))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_relay_stalled_past_its_lease_takes_nothing_back_on_postgres() {
                $crate::brokers::relay::a_relay_stalled_past_its_lease_takes_nothing_back::<$broker, ::sqlx::Postgres>(
                    concat!(stringify!($m), "_stalled_pg"),
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_relay_stalled_past_its_lease_takes_nothing_back_on_mariadb() {
                $crate::brokers::relay::a_relay_stalled_past_its_lease_takes_nothing_back::<$broker, ::sqlx::MySql>(
                    concat!(stringify!($m), "_stalled_my"),
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_relay_told_to_stop_while_its_database_stalls_stops_within_its_grace() {
                $crate::brokers::relay::a_relay_told_to_stop_while_its_database_stalls_stops_within_its_grace::<
                    $broker,
                    ::sqlx::Postgres,
                >(concat!(stringify!($m), "_stopstall"))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_ambiguous_stamp_costs_no_message_and_no_second_effect_on_postgres() {
                $crate::brokers::relay::an_ambiguous_stamp_costs_no_message_and_no_second_effect::<
                    $broker,
                    ::sqlx::Postgres,
                >(concat!(stringify!($m), "_ambiguous_pg"))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_ambiguous_stamp_costs_no_message_and_no_second_effect_on_mariadb() {
                $crate::brokers::relay::an_ambiguous_stamp_costs_no_message_and_no_second_effect::<
                    $broker,
                    ::sqlx::MySql,
                >(concat!(stringify!($m), "_ambiguous_my"))
                .await;
            }
        }
    };
}

/// Generates the steps stories ([`steps`](crate::brokers::steps)) for the broker `$broker` on
/// PostgreSQL, in module `$m` (named as for [`broker_suite!`]), and their consumer child.
#[macro_export]
macro_rules! steps_suite {
    ($m:ident, $broker:ty) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            use $crate::brokers::steps;
            $crate::stories!(steps, [$broker], (stringify!($m), "_");
                a_run_killed_at_each_step_boundary_resumes_after_its_last_finished_step,
                a_batch_side_by_side_killed_at_step_boundaries_resumes_each_message,
                two_deliveries_of_one_message_at_once_run_its_steps_once,
                a_run_stopped_past_its_lease_journals_and_commits_nothing_once_resumed,
                a_poison_step_is_dead_lettered_by_name_its_finished_steps_kept,
                a_request_killed_between_steps_resumes_on_the_retry_after_the_lease,
            );

            $crate::children!(steps, [$broker];
                steps_consumer: "child process of the steps stories",
                shop_server: "child process of the HTTP steps story",
            );
        }
    };
}
