//! The validator's level-1 consensus on one epoch: per project, the CID with
//! the most votes of distinct slots, and the root of the batch. The result
//! depends only on the set of votes, never on the order they arrived in.
//!
//! - **One vote per slot.** A slot that names two different CIDs for the
//!   same project in the same epoch has equivocated: neither counts (an
//!   [`Equivocation`]). Keeping the first would let arrival order pick the
//!   winner, and two honest validators would finalize different CIDs. (The
//!   protocol's validator counts votes per submission, so such a slot votes
//!   twice.)
//! - **A tie finalizes nothing.** A project whose most-voted CIDs have as
//!   many votes each is left out of the batch (a [`Tally::split`]): no rule
//!   over the CIDs themselves would do, since a voter that has seen the
//!   honest CID can make up snapshots until its own CID wins any rule a
//!   validator could compute (the smallest, the smallest hash of anything it
//!   knows). So nobody can steer a tie; a voter can only keep a project out
//!   by matching the honest votes, which would also let it win outright
//!   with one more. (The protocol's validator takes the first maximum in
//!   Go's random map order.)
//! - **The root** is the Merkle root of the `(projectId, cid)` pairs in
//!   project-id order (`lite_node_protocol::merkle`, OpenZeppelin's standard
//!   tree with keccak256), as `0x` and lower-case hex, so one project's CID
//!   can be proven against it alone. (The protocol's validator hashes the
//!   pairs in map order, so two runs disagree.)

use std::collections::{BTreeMap, BTreeSet};

/// One slot's vote: it submitted `cid` for `project_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vote {
    pub slot_id: u64,
    pub project_id: String,
    pub cid: String,
}

/// A slot that named two different CIDs for one project: its vote is void.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Equivocation {
    pub slot_id: u64,
    pub project_id: String,
    /// Every CID it named, in byte order.
    pub cids: BTreeSet<String>,
}

/// One project's finalized CID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finalized {
    pub cid: String,
    /// Distinct slots that voted for it.
    pub votes: u64,
    /// Distinct slots that voted on the project at all.
    pub voters: u64,
}

/// An epoch's tally.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Per project id, in byte order.
    pub projects: BTreeMap<String, Finalized>,
    pub equivocations: Vec<Equivocation>,
    /// Projects left out because their most-voted CIDs tied, in byte order.
    pub split: Vec<String>,
}

/// Counts `votes`, in any order.
pub fn tally(votes: impl IntoIterator<Item = Vote>) -> Tally {
    // project → slot → every CID it named
    let mut ballots: BTreeMap<String, BTreeMap<u64, BTreeSet<String>>> = BTreeMap::new();
    for v in votes {
        ballots.entry(v.project_id).or_default().entry(v.slot_id).or_default().insert(v.cid);
    }
    let mut equivocations = Vec::new();
    let mut projects = BTreeMap::new();
    let mut split = Vec::new();
    for (project, by_slot) in ballots {
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        let mut voters = 0;
        for (slot_id, cids) in &by_slot {
            match cids.first() {
                Some(cid) if cids.len() == 1 => {
                    *counts.entry(cid.as_str()).or_default() += 1;
                    voters += 1;
                }
                _ => equivocations.push(Equivocation {
                    slot_id: *slot_id,
                    project_id: project.clone(),
                    cids: cids.clone(),
                }),
            }
        }
        let Some(votes) = counts.values().max().copied() else {
            continue; // every slot that voted on it equivocated
        };
        let mut most = counts.iter().filter(|(_, n)| **n == votes).map(|(cid, _)| *cid);
        match (most.next(), most.next()) {
            (Some(cid), None) => {
                projects.insert(project, Finalized { cid: cid.to_owned(), votes, voters });
            }
            _ => split.push(project),
        }
    }
    Tally { projects, equivocations, split }
}

/// The batch root over `(project id, cid)` pairs (see the module docs).
pub fn root(projects: &BTreeMap<String, Finalized>) -> String {
    tree(projects).root().to_string()
}

/// The Merkle tree over `(project id, cid)` pairs, leaves in project-id order.
pub fn tree(projects: &BTreeMap<String, Finalized>) -> lite_node_protocol::merkle::Tree {
    lite_node_protocol::merkle::Tree::of(projects.iter().map(|(p, f)| (p.as_str(), f.cid.as_str())))
        .expect("a map holds each project once")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(slot_id: u64, project: &str, cid: &str) -> Vote {
        Vote { slot_id, project_id: project.into(), cid: cid.into() }
    }

    #[test]
    fn the_most_voted_cid_wins_each_slot_votes_once_and_an_equivocating_slot_not_at_all() {
        let votes = [
            vote(1, "p", "bafyA"),
            vote(2, "p", "bafyB"),
            vote(3, "p", "bafyB"),
            vote(1, "p", "bafyB"), // slot 1 changes its mind: neither vote counts
            vote(2, "p", "bafyB"), // a duplicate: counted once
            vote(4, "q", "bafyC"),
            vote(5, "r", "bafyD"),
            vote(5, "r", "bafyE"), // the only voter on r equivocates: r is not finalized
        ];
        let t = tally(votes.clone());
        assert_eq!(t.projects["p"], Finalized { cid: "bafyB".into(), votes: 2, voters: 2 });
        assert_eq!(t.projects["q"], Finalized { cid: "bafyC".into(), votes: 1, voters: 1 });
        assert!(!t.projects.contains_key("r"));
        let cids = |c: &[&str]| c.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            t.equivocations,
            [
                Equivocation { slot_id: 1, project_id: "p".into(), cids: cids(&["bafyA", "bafyB"]) },
                Equivocation { slot_id: 5, project_id: "r".into(), cids: cids(&["bafyD", "bafyE"]) },
            ]
        );
        // Every order of the same votes: the same tally.
        let mut reversed = votes.to_vec();
        reversed.reverse();
        assert_eq!(tally(reversed), t);
    }

    /// A voter that saw the honest CID cannot win a tie with one it made up,
    /// however it chose it (here the smallest CID there can be): a tie
    /// finalizes nothing, whatever the order of arrival; one more vote
    /// decides it.
    #[test]
    fn a_tie_finalizes_nothing_so_no_voter_can_grind_a_winner() {
        let honest = "bafkreihonest";
        let ground = "bafkreiaaaaaa"; // below the honest one in every order a rule could use
        let forward = tally([vote(1, "p", honest), vote(2, "p", ground), vote(3, "q", "bafyQ")]);
        let backward = tally([vote(3, "q", "bafyQ"), vote(2, "p", ground), vote(1, "p", honest)]);
        assert!(!forward.projects.contains_key("p"), "{forward:?}");
        assert_eq!(forward.split, ["p"]);
        assert_eq!(forward.projects["q"].cid, "bafyQ");
        assert_eq!(forward, backward);
        let decided = tally([vote(1, "p", honest), vote(2, "p", ground), vote(4, "p", honest)]);
        assert_eq!(decided.projects["p"], Finalized { cid: honest.into(), votes: 2, voters: 3 });
        assert!(decided.split.is_empty());
    }

    #[test]
    fn the_root_hashes_sorted_pairs_and_does_not_depend_on_arrival() {
        let a = tally([vote(1, "b:x", "bafy2"), vote(1, "a:x", "bafy1")]);
        let b = tally([vote(1, "a:x", "bafy1"), vote(1, "b:x", "bafy2")]);
        assert_eq!(root(&a.projects), root(&b.projects));
        let expected = lite_node_protocol::merkle::hash_pair(
            lite_node_protocol::merkle::leaf("a:x", "bafy1"),
            lite_node_protocol::merkle::leaf("b:x", "bafy2"),
        );
        assert_eq!(root(&a.projects), expected.to_string());
        assert_ne!(root(&a.projects), root(&tally([vote(1, "a:x", "bafy1")]).projects));
    }
}
