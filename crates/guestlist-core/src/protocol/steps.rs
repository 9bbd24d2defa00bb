//! A message's named steps and the journal of the finished ones: what the journal says of the
//! step a handler asks for at its place.
//!
//! A run of a message's steps holds the message as an HTTP attempt holds its key: a lease and a
//! fencing token on one row, whose moves are [`KeyLeaseRow`](super::KeyLeaseRow)'s (a run taken
//! over only once its lease ended, a stale run neither journaling nor committing, a finished run
//! over for good) and whose claim is [`settle`](super::settle)'s. What is the steps' own is the
//! journal: the finished steps, in the order the handler asked for them, each with its result.
//! A step runs only after the one before it is journaled, so the journal is always a prefix of
//! the steps a run asks for.

/// What the journal says of the step a handler asks for at a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepAt<'j> {
    /// Journaled at this place under this name: its result is returned, and it does not run.
    Replay,
    /// The journal ends before this place: the step runs (again, if a run began it and left no
    /// result).
    Run,
    /// The journal holds another step at this place: the handler's code changed between runs
    /// (a step renamed, reordered or removed). Nothing runs and nothing is replayed.
    Changed {
        /// The step the journal holds at this place.
        journaled: &'j str,
    },
}

/// What the journal (`journaled`: the finished steps' names, in order) says of the step `asked`
/// at `place` (counted from 0, in the order the handler asks for its steps).
///
/// ```
/// use guestlist_core::protocol::{StepAt, step_at};
///
/// let journal = ["charge", "reserve"];
/// assert_eq!(step_at(&journal, 0, "charge"), StepAt::Replay);
/// assert_eq!(step_at(&journal, 2, "email"), StepAt::Run);
/// assert_eq!(step_at(&journal, 1, "email"), StepAt::Changed { journaled: "reserve" });
/// ```
pub fn step_at<'j, S: AsRef<str>>(journaled: &'j [S], place: usize, asked: &str) -> StepAt<'j> {
    match journaled.get(place) {
        None => StepAt::Run,
        Some(name) if name.as_ref() == asked => StepAt::Replay,
        Some(name) => StepAt::Changed {
            journaled: name.as_ref(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_replayed_only_at_its_own_place_under_its_own_name() {
        let journal = vec!["charge".to_owned(), "reserve".to_owned()];
        assert_eq!(step_at(&journal, 0, "charge"), StepAt::Replay);
        assert_eq!(step_at(&journal, 1, "reserve"), StepAt::Replay);
        // Reordered: the journal's second step is asked for first.
        assert_eq!(
            step_at(&journal, 0, "reserve"),
            StepAt::Changed {
                journaled: "charge"
            }
        );
        // Removed: the step after a removed one lands on the removed one's place.
        assert_eq!(
            step_at(&journal, 1, "email"),
            StepAt::Changed {
                journaled: "reserve"
            }
        );
        // Past the journal's end, whatever the name: the run goes on from there.
        assert_eq!(step_at(&journal, 2, "email"), StepAt::Run);
        assert_eq!(step_at::<String>(&[], 0, "charge"), StepAt::Run);
    }
}
