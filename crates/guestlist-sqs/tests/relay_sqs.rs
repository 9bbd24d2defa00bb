//! The outbox relay to SQS FIFO queues, from PostgreSQL, SQLite and MariaDB/MySQL. Module
//! names start with two letters no other broker suite's test module uses: they name queues and
//! tables.
//!
//! The relay suite's story of two relays killed again and again does not run here: moto's FIFO
//! queue checks a sent message against every message it holds, about 200 ms for a request of
//! ten at 155 held, so a relay's round of 50 outlasts the story's 600 ms lease and the relays
//! take the lease from each other forever. Each key's order on a FIFO queue is checked instead
//! by `a_relay_keeps_each_keys_order_on_a_fifo_queue`, with one relay.

mod common;

/// The relay suite's stories that moto can carry, on one database.
macro_rules! fifo_relay_suite {
    ($m:ident, $db:ty) => {
        mod $m {
            use super::common;
            use guestlist_testkit::brokers::relay;
            guestlist_testkit::stories!(relay, [common::SqsFifo, $db], (stringify!($m), "_");
                a_rolled_back_write_publishes_nothing_a_committed_one_once,
                sigkill_between_confirm_and_stamp_publishes_again_without_a_second_effect,
                a_relay_that_lost_its_lease_stamps_nothing,
                a_message_no_queue_takes_stays_pending_and_shows_in_the_metrics,
            );
            guestlist_testkit::relay_suite!(@every_broker $m, common::SqsFifo, $db);

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_relay_keeps_each_keys_order_on_a_fifo_queue() {
                guestlist_testkit::brokers::relay::keys_keep_their_order::<common::SqsFifo, $db>(concat!(
                    stringify!($m),
                    "_a_relay_keeps_each_keys_order_on_a_fifo_queue"
                ))
                .await;
            }
        }
    };
}

fifo_relay_suite!(fpg, sqlx::Postgres);
fifo_relay_suite!(flite, sqlx::Sqlite);
fifo_relay_suite!(fmy, sqlx::MySql);
guestlist_testkit::relay_wire_suite!(fwire, common::SqsFifo);
guestlist_testkit::relay_shares_suite!(fshpg, common::SqsFifo, sqlx::Postgres);
