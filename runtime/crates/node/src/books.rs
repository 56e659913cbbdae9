//! The node's books (docs/protocol.md §9): per project and overall, selected and
//! succeeded, selected and failed, not selected; the streak of consecutive
//! selected failures, and the three-failure alert latched until a selected
//! success. Kept in `<data dir>/state/books-<protocol state>-<data market>.json`,
//! written atomically after every epoch, so a restart neither forgets a
//! streak nor alerts twice.

use std::{
    collections::BTreeMap,
    io,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::outcome::{Outcome, OutcomeKind};

/// Consecutive selected failures that raise the alert.
pub const ALERT_AFTER: u64 = 3;
/// Streak entries kept for the alert's text.
const STREAK_KEPT: usize = 10;

/// Counters of one project, or of the node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub selected_success: u64,
    pub selected_failure: u64,
    pub not_selected: u64,
    /// Epochs released longer ago than the submission window (node down):
    /// counted, but they neither extend nor end a streak.
    pub missed: u64,
    /// Failures before the compute reported its selection (preloading
    /// failed, or it timed out first): the slot may not have been selected,
    /// so no streak moves; if it lasts, the safety net sees no processing.
    #[serde(default)]
    pub failed_before_selection: u64,
    pub consecutive_failures: u64,
}

/// One epoch of a failure streak.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreakEntry {
    pub epoch_id: u64,
    pub errors: Vec<String>,
}

/// The last submission the collector answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastSubmission {
    pub epoch_id: u64,
    pub project_id: String,
    pub verdict: String,
    pub answered_at_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Books {
    pub overall: Counts,
    pub projects: BTreeMap<String, Counts>,
    /// The current streak of selected failures, oldest first (the last few).
    pub streak: Vec<StreakEntry>,
    /// The three-failure alert went out for the current streak.
    pub alerted: bool,
    pub last_epoch: Option<u64>,
    pub last_submission: Option<LastSubmission>,
}

/// How one project's epoch counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    SelectedSuccess,
    SelectedFailure(String),
    NotSelected,
    Missed,
    /// Failed before the compute reported whether the slot was selected.
    Unknown(String),
    /// Withheld by the node (its project quarantined): selection unknown,
    /// but the node's failure to work the slot, so it extends the streak.
    Withheld(String),
}

/// What the books ask to be told after an epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A selected project failed (a MISSED_SNAPSHOT report; cooldown applies).
    MissedSnapshot { epoch_id: u64, project: String, error: String },
    /// The streak reached [`ALERT_AFTER`]: once per streak.
    ThreeFailures { streak: Vec<StreakEntry> },
    /// A selected success ended an alerted streak.
    Recovered { epoch_id: u64, failures: u64 },
}

/// How an outcome counts: a failure after the compute said "not selected"
/// is not the slot's work and touches no streak.
pub fn verdict(o: &Outcome) -> Verdict {
    match &o.kind {
        OutcomeKind::Computed => match o.left_out_failure() {
            Some(why) => Verdict::SelectedFailure(why),
            None => Verdict::SelectedSuccess,
        },
        OutcomeKind::NotSelected => Verdict::NotSelected,
        OutcomeKind::Failed(_) if o.selected == Some(false) => Verdict::NotSelected,
        OutcomeKind::Failed(e) if o.selected.is_none() => Verdict::Unknown(e.clone()),
        OutcomeKind::Failed(e) => Verdict::SelectedFailure(e.clone()),
        OutcomeKind::Missed(_) => Verdict::Missed,
        OutcomeKind::Withheld(e) => Verdict::Withheld(e.clone()),
    }
}

impl Counts {
    /// Adds another slot's counts: the epochs sum, and the streak is the
    /// longest of the two (streaks of different slots do not add up).
    pub fn add(&mut self, other: &Counts) {
        self.selected_success += other.selected_success;
        self.selected_failure += other.selected_failure;
        self.not_selected += other.not_selected;
        self.missed += other.missed;
        self.failed_before_selection += other.failed_before_selection;
        self.consecutive_failures = self.consecutive_failures.max(other.consecutive_failures);
    }

    fn count(&mut self, v: &Verdict) {
        match v {
            Verdict::SelectedSuccess => {
                self.selected_success += 1;
                self.consecutive_failures = 0;
            }
            Verdict::SelectedFailure(_) => {
                self.selected_failure += 1;
                self.consecutive_failures += 1;
            }
            Verdict::NotSelected => self.not_selected += 1,
            Verdict::Missed => self.missed += 1,
            Verdict::Unknown(_) => self.failed_before_selection += 1,
            Verdict::Withheld(_) => {
                self.failed_before_selection += 1;
                self.consecutive_failures += 1;
            }
        }
    }
}

impl Books {
    /// The books of one ProtocolState and data market (like the cursor: a
    /// node pointed at another market starts afresh).
    pub fn path(data_dir: &Path, protocol_state: &str, data_market: &str) -> PathBuf {
        data_dir.join("state").join(format!(
            "books-{}-{}.json",
            protocol_state.to_lowercase(),
            data_market.to_lowercase()
        ))
    }

    /// The books saved at `path`, or empty ones.
    pub fn open(path: &Path) -> io::Result<Self> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e} (move it away to start afresh)", path.display()),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    pub fn save(&self, path: &Path) -> io::Result<()> {
        crate::atomic_file::write(path, self.text()?.as_bytes())
    }

    /// The file's text.
    pub fn text(&self) -> io::Result<String> {
        serde_json::to_string_pretty(self).map_err(io::Error::other)
    }

    /// Counts one epoch's outcomes; returns what should be reported.
    pub fn apply(&mut self, epoch_id: u64, outcomes: &[Outcome]) -> Vec<Notice> {
        // Epochs come in order; one counted before a crash (the books are
        // saved before the cursor) and computed again after it counts once.
        if self.last_epoch.is_some_and(|last| epoch_id <= last) {
            tracing::debug!("epoch {epoch_id} is already in the books");
            return Vec::new();
        }
        let mut notices = Vec::new();
        let verdicts: Vec<(String, Verdict)> = outcomes.iter().map(|o| (o.project_type.clone(), verdict(o))).collect();
        for (project, v) in &verdicts {
            self.projects.entry(project.clone()).or_default().count(v);
            if let Verdict::SelectedFailure(error) = v {
                notices.push(Notice::MissedSnapshot { epoch_id, project: project.clone(), error: error.clone() });
            }
        }
        for o in outcomes {
            if let Some(s) = o.submissions.last() {
                self.last_submission = Some(LastSubmission {
                    epoch_id,
                    project_id: s.project_id.clone(),
                    verdict: s.status.to_string(),
                    answered_at_ms: s.answered_at_ms,
                });
            }
        }
        let errors: Vec<String> = verdicts
            .iter()
            .filter_map(|(p, v)| match v {
                Verdict::SelectedFailure(e) => Some(format!("{p}: {e}")),
                _ => None,
            })
            .collect();
        let withheld: Vec<String> = verdicts
            .iter()
            .filter_map(|(p, v)| match v {
                Verdict::Withheld(e) => Some(format!("{p}: {e} (whether the slot was selected is unknown)")),
                _ => None,
            })
            .collect();
        // The node's epoch: failed if any selected project failed, succeeded
        // if every selected project succeeded, a failure too if the node
        // withheld a project (unless another was a success), otherwise not
        // its work.
        let overall = if !errors.is_empty() {
            Verdict::SelectedFailure(errors.join("; "))
        } else if verdicts.iter().any(|(_, v)| *v == Verdict::SelectedSuccess) {
            Verdict::SelectedSuccess
        } else if !withheld.is_empty() {
            Verdict::Withheld(withheld.join("; "))
        } else if !verdicts.is_empty() && verdicts.iter().all(|(_, v)| *v == Verdict::Missed) {
            Verdict::Missed
        } else if let Some((_, v @ Verdict::Unknown(_))) =
            verdicts.iter().find(|(_, v)| matches!(v, Verdict::Unknown(_)))
            && !verdicts.iter().any(|(_, v)| *v == Verdict::NotSelected)
        {
            v.clone()
        } else {
            Verdict::NotSelected
        };
        let failures_before = self.overall.consecutive_failures;
        self.overall.count(&overall);
        match overall {
            Verdict::SelectedFailure(_) | Verdict::Withheld(_) => {
                let errors = if errors.is_empty() { withheld } else { errors };
                self.streak.push(StreakEntry { epoch_id, errors });
                if self.streak.len() > STREAK_KEPT {
                    self.streak.remove(0);
                }
                if self.overall.consecutive_failures >= ALERT_AFTER && !self.alerted {
                    self.alerted = true;
                    notices.push(Notice::ThreeFailures { streak: self.streak.clone() });
                }
            }
            Verdict::SelectedSuccess => {
                if self.alerted {
                    notices.push(Notice::Recovered { epoch_id, failures: failures_before });
                }
                self.alerted = false;
                self.streak.clear();
            }
            Verdict::NotSelected | Verdict::Missed | Verdict::Unknown(_) => {}
        }
        self.last_epoch = Some(epoch_id);
        notices
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn outcome(kind: OutcomeKind, selected: Option<bool>) -> Outcome {
        Outcome {
            project_type: "p".into(),
            kind,
            selected,
            snapshot_count: 0,
            stored: vec![],
            submissions: vec![],
            started_at_ms: 0,
            finished_at_ms: 0,
            left_out: vec![],
        }
    }

    pub(crate) fn fail() -> Outcome {
        outcome(OutcomeKind::Failed("boom".into()), Some(true))
    }

    pub(crate) fn idle() -> Outcome {
        outcome(OutcomeKind::NotSelected, Some(false))
    }

    pub(crate) fn ok() -> Outcome {
        outcome(OutcomeKind::Computed, Some(true))
    }

    fn alerts(n: &[Notice]) -> usize {
        n.iter().filter(|n| matches!(n, Notice::ThreeFailures { .. })).count()
    }

    /// One slot's hung compute quarantines its project for every slot of
    /// the node. The other slots' epochs of it are
    /// withheld: not "failed before selection" (no streak, no alert), but
    /// the node's failure to work them, in the streak and alerted at three.
    #[test]
    fn epochs_withheld_by_a_quarantine_extend_the_streak_and_alert() {
        let withheld = || outcome(OutcomeKind::Withheld("project `p` is quarantined".into()), None);
        let mut b = Books::default();
        assert_eq!(alerts(&b.apply(1, &[withheld()])), 0);
        assert_eq!(alerts(&b.apply(2, &[idle()])), 0);
        assert_eq!(alerts(&b.apply(3, &[withheld()])), 0);
        let n = b.apply(4, &[fail()]);
        assert_eq!(alerts(&n), 1, "{n:?}");
        let Some(Notice::ThreeFailures { streak }) = n.iter().find(|n| matches!(n, Notice::ThreeFailures { .. }))
        else {
            unreachable!()
        };
        assert_eq!(streak.iter().map(|s| s.epoch_id).collect::<Vec<_>>(), [1, 3, 4]);
        assert!(streak[0].errors[0].contains("quarantined") && streak[0].errors[0].contains("unknown"), "{streak:?}");
        assert!(
            !n.iter().any(|n| matches!(n, Notice::MissedSnapshot { epoch_id: 1 | 3, .. })),
            "the quarantine has its own alert"
        );
        assert_eq!(
            b.overall,
            Counts {
                selected_failure: 1,
                not_selected: 1,
                failed_before_selection: 2,
                consecutive_failures: 3,
                ..Counts::default()
            }
        );
        // A project the node did work, successfully, makes the epoch a success.
        let mut b = Books::default();
        b.apply(1, &[withheld(), ok()]);
        assert_eq!(b.overall.consecutive_failures, 0);
    }

    #[test]
    fn three_selected_failures_alert_once_and_not_selected_epochs_neither_reset_nor_extend() {
        let mut b = Books::default();
        assert_eq!(alerts(&b.apply(1, &[fail()])), 0);
        assert_eq!(alerts(&b.apply(2, &[idle()])), 0);
        assert_eq!(alerts(&b.apply(3, &[fail()])), 0);
        assert_eq!(b.overall.consecutive_failures, 2, "not selected did not reset");
        let n = b.apply(4, &[fail()]);
        assert_eq!(alerts(&n), 1);
        let Some(Notice::ThreeFailures { streak }) = n.iter().find(|n| matches!(n, Notice::ThreeFailures { .. }))
        else {
            unreachable!()
        };
        assert_eq!(streak.iter().map(|s| s.epoch_id).collect::<Vec<_>>(), [1, 3, 4]);
        assert_eq!(alerts(&b.apply(5, &[fail()])), 0, "latched");
        assert_eq!(
            b.overall,
            Counts { selected_failure: 4, not_selected: 1, consecutive_failures: 4, ..Counts::default() }
        );

        let n = b.apply(6, &[ok()]);
        assert!(n.contains(&Notice::Recovered { epoch_id: 6, failures: 4 }), "{n:?}");
        assert!(!b.alerted && b.streak.is_empty());
        for e in 7..9 {
            assert_eq!(alerts(&b.apply(e, &[fail()])), 0);
        }
        assert_eq!(alerts(&b.apply(9, &[fail()])), 1, "a new streak alerts again");
    }

    #[test]
    fn a_failure_after_reporting_not_selected_and_missed_epochs_touch_no_streak() {
        let mut b = Books::default();
        b.apply(1, &[fail()]);
        b.apply(2, &[outcome(OutcomeKind::Failed("x".into()), Some(false))]);
        b.apply(3, &[outcome(OutcomeKind::Missed("down".into()), None)]);
        assert_eq!(b.overall.consecutive_failures, 1);
        assert_eq!(b.overall.not_selected, 1);
        assert_eq!(b.overall.missed, 1);
    }

    #[test]
    fn a_failure_before_the_compute_reported_its_selection_moves_no_streak() {
        let mut b = Books::default();
        for e in 1..=5 {
            let n = b.apply(e, &[outcome(OutcomeKind::Failed("preloading block details: rpc down".into()), None)]);
            assert!(n.is_empty(), "{n:?}");
        }
        assert_eq!(b.overall.consecutive_failures, 0);
        assert_eq!(b.overall.failed_before_selection, 5);
        assert_eq!(b.projects["p"].failed_before_selection, 5);
    }

    #[test]
    fn an_epoch_computed_again_after_a_crash_is_counted_once() {
        let mut b = Books::default();
        b.apply(1, &[fail()]);
        b.apply(2, &[fail()]);
        assert!(b.apply(2, &[fail()]).is_empty());
        assert_eq!(b.overall.selected_failure, 2);
        assert_eq!(b.overall.consecutive_failures, 2);
    }

    #[test]
    fn the_books_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = Books::default();
        b.apply(1, &[fail()]);
        b.apply(2, &[fail()]);
        let path = Books::path(dir.path(), "0xPS", "0xDM");
        b.save(&path).unwrap();
        let mut again = Books::open(&path).unwrap();
        assert_eq!(again, b);
        assert_eq!(alerts(&again.apply(3, &[fail()])), 1, "the streak continued across the restart");
    }
}
