//! `guestlist gateway`, black-box: the built binary in front of an upstream that counts its
//! executions. Every story runs with one gateway on SQLite, one on PostgreSQL, and two sharing
//! PostgreSQL with requests alternating between them.

#![allow(unreachable_pub)] // a test crate has no public API

mod harness;
mod suite;

/// One test per story in [`suite`] for the store `$store`, in module `$m`.
macro_rules! gateway_suite {
    ($m:ident, $store:path) => {
        mod $m {
            gateway_suite!(@tests $m, $store;
                five_retries_one_execution_four_replays,
                fifty_concurrent_requests_one_execution,
                another_body_with_the_same_key_gets_422,
                malformed_and_missing_keys_get_400_and_reach_nothing,
                two_scopes_two_executions,
                webhook_keys_from_a_header,
                webhook_keys_from_a_json_field,
                webhook_keys_from_the_body_bytes,
                upstream_down_502_then_a_retry_runs_once,
                upstream_timeout_keeps_the_key_until_the_lease_ends,
                a_dropped_response_keeps_the_key_until_the_lease_ends,
                gateway_killed_mid_request_409_then_one_run_after_the_lease,
                sigterm_finishes_the_request_in_flight,
                metrics_and_health_on_their_own_address,
                operators_inspect_evict_and_count_keys,
            );
        }
    };
    (@tests $m:ident, $store:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let store = $store(concat!(stringify!($m), "_", stringify!($name))).await;
                crate::suite::$name(store).await;
            }
        )*
    };
}

gateway_suite!(sqlite, crate::suite::sqlite);
gateway_suite!(postgres, crate::suite::postgres);

gateway_suite!(shared_postgres, crate::suite::shared_postgres);
