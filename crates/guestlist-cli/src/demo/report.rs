//! The demo's table of what happened.

/// One chapter of the story, counted.
pub(super) struct Chapter {
    pub(super) story: String,
    pub(super) deliveries: u32,
    pub(super) acks: u32,
    pub(super) work_committed: u32,
    pub(super) pick_tasks: i64,
    /// Charges payments made, for the chapter that calls it.
    pub(super) charges: Option<i64>,
    /// What the chapter showed, in a sentence, when the table cannot say it.
    pub(super) note: Option<String>,
}

/// Prints the chapters as an aligned table.
pub(super) fn print(chapters: &[Chapter]) {
    let width = chapters.iter().map(|c| c.story.len()).max().unwrap_or(0);
    println!(
        "{:<width$}  {:>10}  {:>4}  {:>14}  {:>10}  {:>7}",
        "chapter", "deliveries", "acks", "work committed", "pick tasks", "charges"
    );
    for c in chapters {
        let charges = c.charges.map_or_else(|| "-".to_owned(), |n| n.to_string());
        println!(
            "{:<width$}  {:>10}  {:>4}  {:>14}  {:>10}  {:>7}",
            c.story, c.deliveries, c.acks, c.work_committed, c.pick_tasks, charges
        );
    }
}
