//! The Idempotency-Key suite, run against every key store by [`http_suite!`], so that no store
//! can quietly differ.

#![allow(dead_code)] // each test binary uses the parts its stores need
#![allow(unreachable_pub)] // a test crate has no public API

pub mod app;
pub mod client;
pub mod crash;
#[cfg(feature = "postgres")]
pub mod hang_up;
pub mod stores;
pub mod suite;
pub mod waits;
pub mod wire_faults;

/// Generates one `#[tokio::test]` per story in [`suite`] for the store `$store`, in module `$m`.
#[macro_export]
macro_rules! http_suite {
    ($m:ident, $store:ty) => {
        mod $m {
            use super::common;
            // "<module>_<test>": the module (one word) names the tables and the child test.
            guestlist_testkit::stories!(common::suite, [$store], (stringify!($m), "_");
                five_identical_retries_run_the_handler_once,
                thirty_two_concurrent_requests_run_the_handler_once,
                concurrent_retries_of_a_finished_request_all_replay,
                the_same_key_with_another_body_is_422,
                the_same_key_from_two_clients_runs_twice_without_cross_replay,
                the_row_and_the_stored_response_are_both_there,
                a_500_rolls_back_and_releases_the_key,
                a_4xx_from_the_handler_is_stored_and_replayed,
                an_answer_marked_keep_locked_holds_the_key_until_the_lease,
                a_server_killed_mid_handler_leaves_its_key_to_a_retry,
                a_stale_attempt_finishing_late_cannot_overwrite,
                a_stale_attempt_cannot_complete_a_newer_claim_of_its_key,
                a_client_that_hangs_up_gets_the_result_on_retry,
                malformed_and_overlong_keys_get_400_and_store_nothing,
                a_body_over_the_limit_gets_413_and_stores_nothing,
                a_missing_key_passes_through_or_is_refused_where_required,
                a_keyed_request_without_credentials_is_refused,
                one_client_is_one_scope_whatever_the_case_of_its_scheme,
                a_client_over_its_key_caps_gets_429_and_runs_nothing,
                an_oversize_response_is_sent_whole_and_never_run_again,
                quoted_and_bare_keys_name_the_same_key,
                a_replay_cache_answers_retries_from_memory_within_its_window,
            );
            guestlist_testkit::stories!(common::crash, [$store], (stringify!($m), "_");
                twenty_keys_in_flight_at_a_kill_are_answered_after_the_restart,
            );
            guestlist_testkit::stories!(common::waits, [$store], (stringify!($m), "_");
                fifty_requests_on_one_key_wait_for_one_answer,
                prefer_wait_asks_for_less_or_for_none,
                a_released_first_attempt_is_run_again_by_one_waiter,
                waiters_past_the_cap_get_409_at_once,
                a_waiter_that_hangs_up_leaves_its_place,
                a_waiter_on_another_server_learns_of_the_answer,
            );

            /// Not a test on its own: the server that the SIGKILL stories start and kill.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "child process of the SIGKILL stories"]
            async fn sigkill_child() {
                common::crash::serve_child::<$store>().await;
            }
        }
    };
}

/// Generates one `#[tokio::test]` per story in [`wire_faults`] for the store `$store`, which
/// must have a wire (not SQLite), in module `$m`; with `restart`, also the stories of its
/// database restarted, for a store on PostgreSQL.
#[macro_export]
macro_rules! http_wire_faults {
    ($m:ident, $store:ty) => {
        mod $m {
            use super::common;
            guestlist_testkit::stories!(common::wire_faults, [$store], (stringify!($m), "_");
                an_ambiguous_write_of_the_answer_ends_in_one_effect,
                a_stalled_attempt_past_its_lease_changes_nothing_once_released,
            );
        }
    };
    ($m:ident, $store:ty, restart) => {
        mod $m {
            use super::common;
            guestlist_testkit::stories!(common::wire_faults, [$store], (stringify!($m), "_");
                an_ambiguous_write_of_the_answer_ends_in_one_effect,
                a_stalled_attempt_past_its_lease_changes_nothing_once_released,
                a_database_restarted_under_four_clients_answers_each_key_once,
            );
        }
    };
}
