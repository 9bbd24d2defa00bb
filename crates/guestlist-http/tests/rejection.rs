//! `IdempotentTx`'s rejection is a type: a route without the transactional layer answers 500
//! `transaction-unavailable` by itself, and a handler can take the rejection and decide.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use guestlist_http::{IdempotentTx, IdempotentTxRejection};
use guestlist_sqlx::sqlx::Sqlite;
use tower::ServiceExt;

fn request() -> Request<Body> {
    Request::post("/payments")
        .header("idempotency-key", "k-1")
        .body(Body::from("amount=5"))
        .unwrap()
}

async fn read(response: axum::response::Response) -> (StatusCode, serde_json::Value) {
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or_default())
}

#[tokio::test]
async fn a_route_without_the_transactional_layer_answers_transaction_unavailable() {
    async fn pay(_tx: IdempotentTx<Sqlite>) -> StatusCode {
        StatusCode::CREATED
    }
    let app = Router::new().route("/payments", post(pay));
    let (status, problem) = read(app.oneshot(request()).await.unwrap()).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("#transaction-unavailable"),
        "{problem}"
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("IdempotencyLayer::transactional"),
        "the detail says what to add: {problem}"
    );
}

#[tokio::test]
async fn a_handler_can_take_the_rejection_and_match_on_it() {
    async fn pay(
        tx: Result<IdempotentTx<Sqlite>, IdempotentTxRejection>,
    ) -> axum::response::Response {
        match tx {
            Ok(_) => StatusCode::CREATED.into_response(),
            Err(IdempotentTxRejection::MissingLayer) => {
                (StatusCode::NOT_IMPLEMENTED, "no layer here").into_response()
            }
            Err(other) => other.into_response(),
        }
    }
    let app = Router::new().route("/payments", post(pay));
    let response = app.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_IMPLEMENTED);
}
