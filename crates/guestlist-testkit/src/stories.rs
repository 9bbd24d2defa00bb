//! One test per story: the macro every suite uses to turn its story functions into tests.

/// Generates one `#[tokio::test]` (two worker threads) per story: each calls
/// `module::story::<Types>(name)` and awaits it, where `name` is the parts in parentheses
/// followed by the story's name, joined (the suites name their tables, queues and child tests
/// after it).
///
/// ```ignore
/// guestlist_testkit::stories!(common::suite, [Nats, sqlx::Postgres], ("npg", "_");
///     five_publishes_five_acks_one_pick_task,
///     a_poison_message_is_dead_lettered_while_the_rest_flow,
/// );
/// ```
#[macro_export]
macro_rules! stories {
    ($($module:ident)::+, [$($ty:ty),+ $(,)?], ($($prefix:tt)*); $(,)?) => {};
    ($($module:ident)::+, [$($ty:ty),+ $(,)?], ($($prefix:tt)*); $name:ident $(, $rest:ident)* $(,)?) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            $($module)::+::$name::<$($ty),+>(concat!($($prefix)*, stringify!($name))).await;
        }
        $crate::stories!($($module)::+, [$($ty),+], ($($prefix)*); $($rest),*);
    };
}
