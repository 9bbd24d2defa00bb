//! Publishes one OrderPaid event: `order-paid --order 1 --amount 1200 --event evt_9f3k`.
//! Publish it twice to watch the warehouse pick once.

use clap::Parser;
use warehouse_example::broker::Orders;
use warehouse_example::warehouse::OrderPaid;

/// Publishes an OrderPaid event to the warehouse's stream, queue or topic.
#[derive(Parser)]
struct Args {
    /// nats://host:port, amqp://user:password@host:port/%2f, kafka://host:port (several:
    /// kafka://a:9092,b:9092)
    /// or sqs://host:port (a local SQS) or sqs://aws (from the AWS environment)
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    broker: String,
    /// The stream, queue or topic (declared when missing).
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
    /// Whose order it is, if anyone's.
    #[arg(long)]
    customer: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let orders = Orders::new(&args.broker, &args.queue);
    orders.check()?;
    orders.declare().await?;
    orders
        .publish(&OrderPaid {
            id: Some(args.event.clone()),
            order: args.order,
            amount: args.amount,
            customer: args.customer.clone(),
        })
        .await?;
    println!(
        "published OrderPaid {} for order {}",
        args.event, args.order
    );
    Ok(())
}
