//! Notices that a key in flight got its answer (or was released) in another process, for the
//! requests waiting on it: Redis's `PUBLISH`.
//!
//! The first request of a process to wait on a key marks its hash (`waited`), then listens (the
//! others wait without marking it again until the notice). The answer's script (or the
//! release's) publishes the key's name on `<prefix>:answered` only for a marked key: a key
//! nobody waits on pays nothing. Each store subscribes on one connection of its own, opened
//! with the first wait; while it is lost, waiters poll the key as before.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_core::Stream;
use guestlist_core::KeyNotices;
use tokio::sync::watch;

/// The pause before the subscription is opened again, after it failed.
const RESUBSCRIBE: Duration = Duration::from_millis(500);
/// How long the first waits wait for the subscription, before they mark their key.
const SUBSCRIBED: Duration = Duration::from_secs(1);

/// A store's notices, shared by its clones: where its client can open a subscription.
#[derive(Debug)]
pub(crate) struct Notices {
    client: Option<redis::Client>,
    keys: KeyNotices,
    /// Whether the subscribing task runs.
    running: std::sync::atomic::AtomicBool,
    /// Whether the channel is subscribed to now: a key marked before would miss its notice.
    subscribed: watch::Sender<bool>,
}

impl Notices {
    /// Notices through `client`'s subscriptions; none (waiters poll) without a client.
    pub(crate) fn new(client: Option<redis::Client>) -> Self {
        Self {
            client,
            keys: KeyNotices::default(),
            running: std::sync::atomic::AtomicBool::new(false),
            subscribed: watch::Sender::new(false),
        }
    }

    /// The notice of the key `name` (its Redis key), with the subscription to `channel` started
    /// and, the first time, waited for; `None` without a client.
    pub(crate) async fn watch(
        self: &Arc<Self>,
        channel: &str,
        name: String,
    ) -> Option<Arc<guestlist_core::KeyNotice>> {
        use std::sync::atomic::Ordering::SeqCst;
        let client = self.client.as_ref()?;
        if !self.running.swap(true, SeqCst) {
            let task = subscribe(Arc::downgrade(self), client.clone(), channel.to_owned());
            tokio::spawn(task);
        }
        let mut subscribed = self.subscribed.subscribe();
        if !*subscribed.borrow_and_update() {
            let _ = tokio::time::timeout(SUBSCRIBED, subscribed.wait_for(|on| *on)).await;
        }
        Some(self.keys.watch(name))
    }
}

/// Subscribes to `channel` and wakes the keys named in its messages, opening the subscription
/// again whenever it fails; ends when the store is dropped.
async fn subscribe(notices: Weak<Notices>, client: redis::Client, channel: String) {
    struct Stopped(Weak<Notices>);
    impl Drop for Stopped {
        fn drop(&mut self) {
            if let Some(notices) = self.0.upgrade() {
                notices.subscribed.send_replace(false);
                notices
                    .running
                    .store(false, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
    let _stopped = Stopped(notices.clone());
    loop {
        let opened = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            redis::RedisResult::Ok(pubsub.into_on_message())
        };
        let mut messages = match opened.await {
            Ok(messages) => messages,
            Err(err) => {
                tracing::debug!(error = %err, "cannot subscribe to keys' answers; waiters poll");
                tokio::time::sleep(RESUBSCRIBE).await;
                continue;
            }
        };
        match notices.upgrade() {
            Some(notices) => notices.subscribed.send_replace(true),
            None => return,
        };
        loop {
            let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut messages).poll_next(cx));
            let Some(message) = next.await else {
                break; // the connection is gone: subscribe again
            };
            let Some(notices) = notices.upgrade() else {
                return;
            };
            if let Ok(name) = message.get_payload::<String>() {
                notices.keys.tell(&name);
            }
        }
        match notices.upgrade() {
            Some(notices) => notices.subscribed.send_replace(false),
            None => return,
        };
        tracing::debug!("lost the subscription to keys' answers; waiters poll meanwhile");
        tokio::time::sleep(RESUBSCRIBE).await;
    }
}
