//! A retry of an incoming dead letter whose process is SIGKILLed at each of its steps: after
//! marking the letter, before publishing it; after the broker confirmed it, before marking it
//! retried. Neither kill leaves a letter both dead and retried, nor loses one: the next retry
//! finishes it, and its handler runs it once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use guestlist_sqlx::{DeadRetry, DeadState, OutboxMessage, Outcomes, Publish, PublishError};

use crate::Fixture;
use crate::brokers::child::{Running, parent};
use crate::brokers::suite::dead_retry::{dead_lettered, effects_of};
use crate::brokers::{Broker, Rig};

/// The environment variable the retrier reads the letter's id from.
const ID: &str = "GUESTLIST_RETRY_ID";
/// The environment variable the retrier reads where to stop from: `before` or `after` the
/// publish.
const STOP: &str = "GUESTLIST_RETRY_STOP";

/// Two dead letters, each retried by a process killed at one of the retry's steps, then retried
/// again: each handled once, each retried once, none left dead or retrying.
pub async fn a_retry_killed_at_each_step_loses_nothing_and_runs_once<B: Broker, DB: Fixture>(
    name: &str,
) {
    let rig = Rig::<B, DB>::open(name, Duration::from_secs(30)).await;
    let (stop, task) = dead_lettered(&rig, "evt_k", 2).await;
    rig.cured.store(true, Ordering::SeqCst);
    let publisher = rig.broker.publisher().await;
    for (id, step) in [("evt_k0", "before"), ("evt_k1", "after")] {
        let retrier = Running(rig.child(
            name,
            "dead_retrier",
            &[(ID, id.to_owned()), (STOP, step.to_owned())],
        ));
        let state = async || {
            let letter = rig.inbox.dead_letter(&rig.db.pool, "warehouse", id).await;
            letter.unwrap().map(|l| l.state)
        };
        rig.until(
            Duration::from_secs(30),
            &format!("the retrier of {id} stops {step} its publish"),
            || async {
                let marked = state().await == Some(DeadState::Retrying);
                // Past the publish, the message is out: its handler runs it meanwhile.
                marked && (step == "before" || effects_of(&rig, id).await == 1)
            },
        )
        .await;
        drop(retrier); // SIGKILL
        assert_eq!(
            state().await,
            Some(DeadState::Retrying),
            "{id}, killed {step} its publish, is neither dead nor retried, nor gone"
        );
        if step == "before" {
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(effects_of(&rig, id).await, 0, "{id} never went out");
        }
        let finished = rig
            .inbox
            .retry_dead(&rig.db.pool, &publisher, "warehouse", id, "operator-2")
            .await
            .unwrap();
        assert_eq!(
            finished,
            DeadRetry::Retried { retry: 1 },
            "the same retry, finished"
        );
        rig.until(
            Duration::from_secs(30),
            &format!("{id} is handled"),
            || async { effects_of(&rig, id).await == 1 },
        )
        .await;
    }
    rig.stop_drained(stop, task, Duration::from_secs(30)).await;
    assert_eq!(rig.effects().await, (2, 2), "each retried letter ran once");
    let letters = rig.inbox.dead_letters(&rig.db.pool, 10).await.unwrap();
    assert!(
        letters
            .iter()
            .all(|l| l.state == DeadState::Retried && l.retries == 1),
        "both retried once: {letters:?}"
    );
}

/// The retrier the story starts and kills (a child test): it retries one letter through a
/// publisher that stops for good before or after the broker's confirmation.
pub async fn dead_retrier<B: Broker, DB: Fixture>() {
    let Some((tag, url)) = parent("dead_retrier") else {
        return;
    };
    let (id, step) = (std::env::var(ID).unwrap(), std::env::var(STOP).unwrap());
    let rig = Rig::<B, DB>::attach(&tag, &url, Duration::from_secs(30)).await;
    let publisher = Stopping {
        inner: rig.broker.publisher().await,
        after: step == "after",
    };
    let _ = rig
        .inbox
        .retry_dead(&rig.db.pool, &publisher, "warehouse", &id, "operator-1")
        .await;
    unreachable!("the retrier stops in its publish");
}

/// A publisher that stops for good before its publish, or after the broker confirmed it: the
/// moment the story kills the process at.
struct Stopping<P> {
    inner: P,
    after: bool,
}

impl<P: Publish> Publish for Stopping<P> {
    fn check(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.inner.check(message)
    }

    async fn publish(&self, messages: &[OutboxMessage], outcomes: &mut Outcomes) {
        if self.after {
            self.inner.publish(messages, outcomes).await;
        }
        std::future::pending::<()>().await;
    }
}
