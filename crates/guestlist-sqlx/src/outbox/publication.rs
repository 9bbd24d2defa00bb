//! A batch handed to the broker under the lease: each message's send span, and its
//! confirmations awaited up to the confirm timeout while the lease is kept ([`super::lease`]).

use std::borrow::Cow;
use std::time::Instant;

use crate::backend::Backend;
use crate::outbox::lease::Leases;
use crate::outbox::relay::Relay;
use guestlist_core::{Confirmed, OutboxMessage, Outcomes, Publish, PublishError, trace_context};

/// What a batch's publish came to.
#[derive(Default)]
pub(super) struct Publication {
    pub(super) outcomes: Vec<Option<Result<Confirmed, PublishError>>>,
    /// The confirm timeout ran out first.
    pub(super) timed_out: bool,
    /// The lease was lost while the round waited.
    pub(super) lost: bool,
    /// The last time the lease was renewed while the round waited.
    pub(super) renewed_at: Option<Instant>,
    /// Nothing went out: the lease stopped being usable on this relay's clock while the batch
    /// was made ready (a relay starved of CPU, or stopped, between the round's check and here).
    pub(super) unsent: bool,
}

/// How the wait for a batch's confirmations ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Confirmed,
    TimedOut,
    LeaseLost,
}

impl<DB: Backend, P: Publish> Relay<DB, P> {
    /// Publishes `messages` and waits for their confirmations, up to the confirm timeout,
    /// renewing the lease while it waits; the outcomes given by then are kept. The lease's
    /// last check comes after the batch is ready, right before the broker, so that a relay
    /// stalled in between (CPU-starved, or stopped) publishes nothing on a lease another relay
    /// may have taken meanwhile.
    pub(super) async fn publish(&self, messages: &[OutboxMessage], lease: &Leases) -> Publication {
        let mut publication = Publication::default();
        if messages.is_empty() {
            return publication;
        }
        let held = lease.held();
        let mut outcomes = Outcomes::with_capacity(messages.len());
        let renewed = std::sync::Mutex::new(None::<Instant>);
        let spans: Vec<tracing::Span> = messages.iter().map(send_span).collect();
        let traced = carry_context(messages, &spans);
        if !lease.usable(Instant::now()) {
            publication.unsent = true;
            for span in &spans {
                span.record("guestlist.outcome", "lease lost");
            }
            return publication;
        }
        let ended = {
            let publish = self.send(&traced, &mut outcomes);
            tokio::select! {
                () = publish => Ended::Confirmed,
                () = tokio::time::sleep(self.confirm_timeout) => Ended::TimedOut,
                () = self.keep_lease(&held, &renewed) => Ended::LeaseLost,
            }
        };
        publication.timed_out = ended == Ended::TimedOut;
        publication.lost = ended == Ended::LeaseLost;
        publication.renewed_at = *renewed.lock().unwrap_or_else(|p| p.into_inner());
        publication.outcomes = outcomes.into_slots(messages.len());
        for (span, outcome) in spans.iter().zip(&publication.outcomes) {
            span.record("guestlist.outcome", outcome_name(outcome, ended));
        }
        publication
    }
}

/// The span of one message's send: the child of the context it was enqueued under (its
/// `traceparent` header), in OpenTelemetry's messaging conventions.
fn send_span(message: &OutboxMessage) -> tracing::Span {
    let span = tracing::info_span!(
        "guestlist.relay.send",
        otel.name = format!("send {}", message.topic),
        otel.kind = "producer",
        messaging.operation.type = "send",
        messaging.destination.name = message.topic.as_str(),
        messaging.message.id = message.message_id.as_str(),
        guestlist.ordering_key = message.ordering_key.as_deref(),
        guestlist.shard = message.shard,
        guestlist.token = message.token,
        guestlist.outcome = tracing::field::Empty,
    );
    if !span.is_disabled() {
        trace_context::adopt_from(&span, &message.headers);
    }
    span
}

/// The messages as the broker gets them: each with the context of its send span in place of
/// the one it was enqueued with, so that its consumer's span is the send's child. A message
/// whose send span has no context (no propagation installed, or the span filtered out) keeps
/// the context it was enqueued with, and when none has one the batch goes as it is, uncopied.
fn carry_context<'a>(
    messages: &'a [OutboxMessage],
    spans: &[tracing::Span],
) -> Cow<'a, [OutboxMessage]> {
    if !trace_context::installed() || spans.iter().all(tracing::Span::is_disabled) {
        return Cow::Borrowed(messages);
    }
    let traced = messages
        .iter()
        .zip(spans)
        .map(|(message, span)| {
            let mut message = message.clone();
            let ours = trace_context::headers_of(span);
            if !ours.is_empty() {
                message
                    .headers
                    .retain(|(name, _)| !trace_context::is_trace_header(name));
                message.headers.extend(ours);
            }
            message
        })
        .collect();
    Cow::Owned(traced)
}

/// How one message's send ended, for its span.
fn outcome_name(outcome: &Option<Result<Confirmed, PublishError>>, ended: Ended) -> &'static str {
    match outcome {
        Some(Ok(Confirmed::Duplicate)) => "duplicate",
        Some(Ok(_)) => "confirmed",
        Some(Err(err)) if err.is_permanent() => "unpublishable",
        Some(Err(err)) if err.kind() == guestlist_core::FailureKind::Outage => "outage",
        Some(Err(_)) => "refused",
        None if ended == Ended::LeaseLost => "lease lost",
        None => "unconfirmed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guestlist_core::trace_context::{Propagation, TRACEPARENT};

    /// A propagation that gives every span it can see one context.
    struct Fixed;

    impl Propagation for Fixed {
        fn inject(&self, span: &tracing::Span, set: &mut dyn FnMut(&str, String)) {
            if !span.is_disabled() {
                set(TRACEPARENT, "00-send-span-01".to_owned());
            }
        }
        fn adopt(&self, _: &tracing::Span, _: &dyn Fn(&str) -> Option<String>) {}
    }

    #[test]
    fn a_send_span_without_a_context_leaves_the_enqueued_one_on_the_message() {
        trace_context::install(Fixed);
        let mut message = OutboxMessage::new("evt_1", "orders.paid", b"{}".to_vec());
        message.headers = vec![
            (TRACEPARENT.to_owned(), "00-enqueued-01".to_owned()),
            ("x-tenant".to_owned(), "acme".to_owned()),
        ];
        let messages = [message];
        // No subscriber here: the send span is off, and the trace must not break at the relay.
        let spans = [tracing::Span::none()];
        let sent = carry_context(&messages, &spans);
        assert!(matches!(sent, Cow::Borrowed(_)), "nothing copied");
        assert_eq!(sent[0].headers, messages[0].headers);
    }
}
