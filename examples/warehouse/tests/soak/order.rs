//! Each customer's orders reached the warehouse in the order they were placed. A client is a
//! customer and places its orders one after another, the next only once the last was answered
//! 2xx (committed): placing order is commit order. The warehouse counts each customer's
//! arrivals under the customer's row lock (`arrivals.rank`), in the order its handlers
//! committed.

use std::collections::BTreeMap;

use guestlist::sqlx::{self, PgPool};
use serde::Serialize;

/// What the order check found.
#[derive(Debug, Default, Serialize)]
pub struct Ordered {
    /// Customers with two or more orders placed.
    pub customers: usize,
    /// Orders of those customers checked.
    pub orders: usize,
    /// An order that reached the warehouse after a later one of its customer.
    pub out_of_order: Vec<Late>,
    /// An order that reached the warehouse more than once, with each arrival.
    pub repeated: Vec<String>,
}

/// An order that reached the warehouse after a later one of its customer.
#[derive(Debug, Serialize)]
pub struct Late {
    /// What happened, with both orders' arrivals.
    pub what: String,
    /// The keys of the earlier-placed order and of the one that overtook it.
    pub keys: [String; 2],
}

/// The customer and place of a key `soak-<seed>-<client>-<n>`.
pub fn customer_of(key: &str) -> Option<(String, u64)> {
    let mut parts = key.rsplitn(3, '-');
    let n = parts.next()?.parse().ok()?;
    let client = parts.next()?;
    Some((format!("c{client}"), n))
}

/// Checks the orders `told` (order id → key) against the warehouse's arrivals at `pool`.
pub async fn check(told: &BTreeMap<i64, &str>, pool: &PgPool) -> Ordered {
    let arrivals: Vec<(String, i64, i64, String)> =
        sqlx::query_as("SELECT customer, order_id, rank, how FROM arrivals ORDER BY rank")
            .fetch_all(pool)
            .await
            .expect("the warehouse's arrivals");
    // Each order's arrivals, first first: its place is checked by the first.
    let mut each: BTreeMap<i64, Vec<(String, i64, String)>> = BTreeMap::new();
    for (customer, order, rank, how) in arrivals {
        each.entry(order).or_default().push((customer, rank, how));
    }
    let repeated = each
        .iter()
        .filter(|(_, arrived)| arrived.len() > 1)
        .map(|(order, arrived)| {
            let arrived: Vec<String> = arrived
                .iter()
                .map(|(_, rank, how)| format!("{rank}th {how}"))
                .collect();
            format!("order {order} arrived {}", arrived.join("; then "))
        });
    let mut placed: BTreeMap<String, Vec<(u64, i64, &str)>> = BTreeMap::new();
    for (order, key) in told {
        if let Some((customer, n)) = customer_of(key) {
            placed.entry(customer).or_default().push((n, *order, key));
        }
    }
    let mut ordered = Ordered {
        repeated: repeated.collect(),
        ..Ordered::default()
    };
    for (customer, mut orders) in placed {
        if orders.len() < 2 {
            continue;
        }
        orders.sort();
        ordered.customers += 1;
        ordered.orders += orders.len();
        // Each order against the one placed before it that reached the warehouse at all (the
        // pick-task check names one that did not).
        let mut before: Option<(i64, &str, i64, &str)> = None;
        for (_, order, key) in orders {
            let first = each.get(&order).and_then(|arrived| arrived.first());
            let Some((_, arrived, how)) = first.filter(|(c, ..)| *c == customer) else {
                continue;
            };
            if let Some((earlier, earlier_key, earlier_arrived, earlier_how)) = before
                && *arrived <= earlier_arrived
            {
                ordered.out_of_order.push(Late {
                    what: format!(
                        "customer {customer}: order {order} ({key}) arrived {arrived}th ({how}), \
                         not after order {earlier} ({earlier_key}), placed before it and \
                         arrived {earlier_arrived}th ({earlier_how})"
                    ),
                    keys: [earlier_key.to_owned(), key.to_owned()],
                });
            }
            before = Some((order, key, *arrived, how));
        }
    }
    ordered
}

#[cfg(test)]
mod tests {
    use super::customer_of;

    #[test]
    fn a_key_names_its_client_and_place() {
        assert_eq!(customer_of("soak-42-3-17"), Some(("c3".to_owned(), 17)));
        assert_eq!(customer_of("nonsense"), None);
    }
}
