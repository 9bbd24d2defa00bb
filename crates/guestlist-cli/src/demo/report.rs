//! The demo's table of what happened.

/// One chapter of the story, counted.
pub(super) struct Chapter {
    pub(super) story: String,
    pub(super) deliveries: u32,
    pub(super) acks: u32,
    pub(super) work_committed: u32,
    pub(super) pick_tasks: i64,
}

/// Prints the chapters as an aligned table.
pub(super) fn print(chapters: &[Chapter]) {
    let width = chapters.iter().map(|c| c.story.len()).max().unwrap_or(0);
    println!(
        "{:<width$}  {:>10}  {:>4}  {:>14}  {:>10}",
        "chapter", "deliveries", "acks", "work committed", "pick tasks"
    );
    for c in chapters {
        println!(
            "{:<width$}  {:>10}  {:>4}  {:>14}  {:>10}",
            c.story, c.deliveries, c.acks, c.work_committed, c.pick_tasks
        );
    }
}
