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

/// Generates one ignored `#[tokio::test]` (two worker threads) per child process the stories
/// start: each calls `module::child::<Types>()` and awaits it, and is ignored with the reason
/// given, so that it runs only when a story starts it by name (`--exact --ignored`).
///
/// ```ignore
/// guestlist_testkit::children!(suite, [Nats, sqlx::Postgres];
///     term_consumer: "child process of sigterm_mid_batch_finishes_the_batch_and_loses_nothing",
/// );
/// ```
#[macro_export]
macro_rules! children {
    ($module:ident, [$($ty:ty),+ $(,)?]; $(,)?) => {};
    ($module:ident, [$($ty:ty),+ $(,)?]; $name:ident: $why:literal $(, $rest:ident: $rest_why:literal)* $(,)?) => {
        #[doc = concat!("Not a test on its own: the ", $why, ".")]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = $why]
        async fn $name() {
            $module::$name::<$($ty),+>().await;
        }
        $crate::children!($module, [$($ty),+]; $($rest: $rest_why),*);
    };
}
