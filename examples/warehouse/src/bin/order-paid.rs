//! Publishes one OrderPaid event: `order-paid --order 1 --amount 1200 --event evt_9f3k`.
//! Publish it twice to watch the warehouse pick once.

use clap::Parser;
use warehouse_example::broker::Orders;
use warehouse_example::warehouse::OrderPaid;

/// Publishes an OrderPaid event to the warehouse's stream or queue.
#[derive(Parser)]
struct Args {
    /// nats://host:port or amqp://user:password@host:port/%2f
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    broker: String,
    /// The NATS stream or RabbitMQ queue (declared when missing).
    #[arg(long, default_value = "ORDERS")]
    queue: String,
    /// The event's id: publish the same id again for a duplicate.
    #[arg(long, default_value = "evt_9f3k")]
    event: String,
    /// The order paid.
    #[arg(long)]
    order: i64,
    /// In cents.
    #[arg(long, default_value_t = 1200)]
    amount: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let orders = Orders::new(&args.broker, &args.queue);
    orders.declare().await?;
    orders
        .publish(&OrderPaid {
            id: Some(args.event.clone()),
            order: args.order,
            amount: args.amount,
        })
        .await?;
    println!(
        "published OrderPaid {} for order {}",
        args.event, args.order
    );
    Ok(())
}
