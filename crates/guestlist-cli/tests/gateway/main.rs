//! `guestlist gateway`, black-box: the built binary in front of an upstream that counts its
//! executions. Every story runs with one gateway on SQLite, one on PostgreSQL, one on MariaDB,
//! one on Redis, and two sharing PostgreSQL with requests alternating between them.

#![allow(unreachable_pub)] // a test crate has no public API

mod clock;
mod console_figures;
mod hang_up;
mod harness;
mod sealed;
mod slow_clients;
mod suite;
mod traced;
mod wire_faults;

/// One test per story in [`suite`] for the store `$store`, in module `$m`.
macro_rules! gateway_suite {
    ($m:ident, $store:path) => {
        mod $m {
            gateway_suite!(@tests $m, $store;
                five_retries_one_execution_four_replays,
                fifty_concurrent_requests_one_execution,
                fifty_concurrent_requests_wait_for_one_answer,
                another_body_with_the_same_key_gets_422,
                malformed_and_missing_keys_get_400_and_reach_nothing,
                two_scopes_two_executions,
                blank_or_doubled_credentials_share_no_scope,
                scoped_keys_stay_apart_and_parse_upstream,
                connect_and_options_star_are_answered_here,
                limits_and_methods_are_the_operators,
                webhook_keys_from_a_header,
                webhook_keys_from_a_json_field,
                webhook_keys_from_the_body_bytes,
                upstream_down_502_then_a_retry_runs_once,
                upstream_timeout_keeps_the_key_until_the_lease_ends,
                a_dropped_response_keeps_the_key_until_the_lease_ends,
                an_upstream_500_keeps_the_key_a_503_releases_it,
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
gateway_suite!(mysql, crate::suite::mysql);
gateway_suite!(redis, crate::suite::redis);

gateway_suite!(shared_postgres, crate::suite::shared_postgres);

/// Two gateways on one key table, one with its clock ten minutes off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_whose_clock_is_off_takes_no_key_over_early() {
    crate::clock::a_gateway_whose_clock_is_off_takes_no_key_over_early().await;
}

/// The stories of a fault on the wire to the store, one test per store with a server.
mod wire_faults_on {
    use crate::suite;
    use crate::wire_faults::an_ambiguous_write_of_the_answer_is_replayed_not_run_again as story;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        story(suite::postgres("wire_postgres").await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql() {
        story(suite::mysql("wire_mysql").await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis() {
        story(suite::redis("wire_redis").await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_database_restarted_under_four_clients_runs_each_key_once() {
        crate::wire_faults::a_database_restarted_under_four_clients_runs_each_key_once().await;
    }
}

/// One test per point at which a client hangs up, on one gateway on PostgreSQL.
macro_rules! hang_up {
    ($($name:ident: $point:ident),* $(,)?) => {
        mod hang_up_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    crate::hang_up::a_client_that_hangs_up_never_strands_its_key(
                        concat!("hang_up_", stringify!($name)),
                        guestlist_testkit::hang_up::HangUp::$point,
                    )
                    .await;
                }
            )*
        }
    };
}

hang_up!(
    before_the_claim: BeforeTheClaim,
    during_the_claim_commit: DuringTheClaimCommit,
    during_the_upstream: DuringTheWork,
    during_the_answer_commit: DuringTheAnswerCommit,
);

/// Settings from a TOML file and the environment, logs as JSON: the binary as an operator
/// configures it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_from_a_file_and_the_environment_logs_as_json() {
    use tokio::io::AsyncBufReadExt;

    let upstream = harness::Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "upstream = \"{}\"\nlisten = \"127.0.0.1:0\"\nkey-from = \"json:/id\"\nlease = \"1m\"\n",
            upstream.url
        ),
    )
    .unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_guestlist"))
        .args(["gateway", "--config"])
        .arg(&config)
        .env(
            "GUESTLIST_DATABASE_URL",
            format!("sqlite:{}", dir.path().join("keys.db").display()),
        )
        .env("GUESTLIST_GATEWAY_SCOPE_FROM", "none")
        .env("GUESTLIST_LOG_FORMAT", "json")
        .env("GUESTLIST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = stdout
        .next_line()
        .await
        .unwrap()
        .expect("the gateway says where it listens");
    let url = line
        .strip_prefix("guestlist gateway on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    let event = b"{\"id\": \"evt_9f3k\"}";
    let first = harness::post(&format!("{url}/hooks"), &[], event).await;
    let second = harness::post(&format!("{url}/hooks"), &[], event).await;
    assert_eq!(
        (first.status, second.replayed),
        (201, true),
        "keyed by /id, from the file"
    );
    assert_eq!(
        upstream.executions("/hooks"),
        1,
        "scope none, from the environment"
    );
    child.start_kill().unwrap();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut logged = 0;
    while let Some(line) = stderr.next_line().await.unwrap() {
        let entry: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("a JSON log line: {line}"));
        assert!(
            entry["level"].is_string() && entry["fields"].is_object(),
            "{line}"
        );
        logged += 1;
    }
    assert!(logged > 0, "the gateway logged its requests");
}

mod upload;

/// A 413 the client reads, however it uploads (SQLite: the refusal comes before the store).
macro_rules! upload_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                upload::$name().await;
            }
        )*
    };
}

upload_tests!(
    an_oversize_upload_reads_its_413_not_a_reset,
    an_oversize_chunked_upload_reads_its_413_not_a_reset,
    a_client_that_expects_100_continue_gets_the_413_and_sends_nothing,
);
