//! The root of an epoch's finalized CIDs (docs/protocol.md §11): a Merkle
//! tree laid out as OpenZeppelin's `StandardMerkleTree` lays it out, so a
//! proof checks with OpenZeppelin's `MerkleProof.verify` on chain and its
//! `@openzeppelin/merkle-tree` library off chain.
//!
//! - **Leaves** are the `(projectId, cid)` pairs in project-id order (byte
//!   order; OpenZeppelin's `sortLeaves: false`), each hashed twice:
//!   `keccak256(keccak256(abi.encode(string projectId, string cid)))`.
//! - **The tree** is a complete binary tree in one array of `2n − 1` nodes:
//!   leaf `i` at index `2n − 2 − i`, node `j` the hash of nodes `2j + 1` and
//!   `2j + 2`, the root at 0.
//! - **A pair** is hashed in sorted order: `keccak256(min(a, b) ‖ max(a, b))`,
//!   so a proof is only the siblings, from the leaf up.
//! - **No leaves**: the root is `keccak256("")` (never zero, which the
//!   contract refuses).

use alloy::{
    primitives::{B256, keccak256},
    sol_types::SolValue,
};

/// A pair's leaf hash.
pub fn leaf(project_id: &str, cid: &str) -> B256 {
    let encoded = (project_id.to_owned(), cid.to_owned()).abi_encode_params();
    keccak256(keccak256(encoded))
}

/// Two nodes' parent.
pub fn hash_pair(a: B256, b: B256) -> B256 {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut both = [0u8; 64];
    both[..32].copy_from_slice(lo.as_slice());
    both[32..].copy_from_slice(hi.as_slice());
    keccak256(both)
}

/// The tree over `pairs` (`(project id, cid)`, which must be in project-id
/// order: see [`Tree::of`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    nodes: Vec<B256>,
    leaves: usize,
}

impl Tree {
    /// The tree over `pairs`, sorted here by project id; a project id given
    /// twice is an error.
    pub fn of<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, String> {
        let mut pairs: Vec<(&str, &str)> = pairs.into_iter().collect();
        pairs.sort();
        if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(format!("project {} appears twice", w[0].0));
        }
        let n = pairs.len();
        if n == 0 {
            return Ok(Self { nodes: Vec::new(), leaves: 0 });
        }
        let mut nodes = vec![B256::ZERO; 2 * n - 1];
        let last = nodes.len() - 1;
        for (i, (p, c)) in pairs.iter().enumerate() {
            nodes[last - i] = leaf(p, c);
        }
        for j in (0..n - 1).rev() {
            nodes[j] = hash_pair(nodes[2 * j + 1], nodes[2 * j + 2]);
        }
        Ok(Self { nodes, leaves: n })
    }

    pub fn root(&self) -> B256 {
        self.nodes.first().copied().unwrap_or_else(|| keccak256([]))
    }

    /// The proof of the `i`-th leaf in project-id order: its siblings from
    /// the leaf up.
    pub fn proof(&self, i: usize) -> Option<Vec<B256>> {
        proof_of(self.leaves, i, |j| Ok::<_, std::convert::Infallible>(self.nodes[j])).unwrap_or_else(|e| match e {})
    }

    /// The tree's nodes, the root first (the module docs' layout): what a
    /// store keeps to give proofs without the pairs.
    pub fn nodes(&self) -> &[B256] {
        &self.nodes
    }
}

/// [`Tree::proof`] of leaf `i` of a tree of `leaves` leaves whose node `j`
/// is `node(j)` (kept elsewhere, read as needed: one read a level).
pub fn proof_of<E>(
    leaves: usize,
    i: usize,
    mut node: impl FnMut(usize) -> Result<B256, E>,
) -> Result<Option<Vec<B256>>, E> {
    if i >= leaves {
        return Ok(None);
    }
    let mut at = 2 * leaves - 2 - i;
    let mut proof = Vec::new();
    while at > 0 {
        let sibling = if at % 2 == 1 { at + 1 } else { at - 1 };
        proof.push(node(sibling)?);
        at = (at - 1) / 2;
    }
    Ok(Some(proof))
}

/// A proof that several leaves are in a tree at once, as OpenZeppelin's
/// `MerkleProof.multiProofVerify` takes it (and `getMultiProof` makes it):
/// the leaves go in tree order, which is project-id order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MultiProof {
    pub proof: Vec<B256>,
    pub flags: Vec<bool>,
}

impl Tree {
    /// The number of leaves.
    pub fn len(&self) -> usize {
        self.leaves
    }

    pub fn is_empty(&self) -> bool {
        self.leaves == 0
    }

    /// The multiproof of the leaves `range` (in project-id order); `None`
    /// for an empty range or one past the end.
    pub fn multiproof(&self, range: std::ops::Range<usize>) -> Option<MultiProof> {
        multiproof_of(self.leaves, range, |j| Ok::<_, std::convert::Infallible>(self.nodes[j]))
            .unwrap_or_else(|e| match e {})
    }
}

/// [`Tree::multiproof`] of the leaves `range` of a tree of `leaves` leaves
/// whose node `j` is `node(j)`: only the nodes the proof carries are read.
pub fn multiproof_of<E>(
    leaves: usize,
    range: std::ops::Range<usize>,
    mut node: impl FnMut(usize) -> Result<B256, E>,
) -> Result<Option<MultiProof>, E> {
    if range.is_empty() || range.end > leaves {
        return Ok(None);
    }
    let last = 2 * leaves - 2;
    // Tree indices, largest first: leaf order.
    let mut queue: std::collections::VecDeque<usize> = range.map(|i| last - i).collect();
    let mut out = MultiProof::default();
    while let Some(&j) = queue.front() {
        if j == 0 {
            break;
        }
        queue.pop_front();
        let sibling = if j % 2 == 1 { j + 1 } else { j - 1 };
        if queue.front() == Some(&sibling) {
            out.flags.push(true);
            queue.pop_front();
        } else {
            out.flags.push(false);
            out.proof.push(node(sibling)?);
        }
        queue.push_back((j - 1) / 2);
    }
    Ok(Some(out))
}

/// The root `leaves` (in tree order) and `proof` lead to, as the contract's
/// `storeFinalizedCids` computes it; `None` where the lengths do not add up.
pub fn multiproof_root(leaves: &[B256], proof: &MultiProof) -> Option<B256> {
    let total = proof.flags.len();
    if leaves.len() + proof.proof.len() != total + 1 {
        return None;
    }
    let mut hashes: Vec<B256> = Vec::with_capacity(total);
    let (mut leaf_at, mut hash_at, mut proof_at) = (0, 0, 0);
    let mut next = |hashes: &Vec<B256>| {
        if leaf_at < leaves.len() {
            leaf_at += 1;
            Some(leaves[leaf_at - 1])
        } else {
            hash_at += 1;
            hashes.get(hash_at - 1).copied()
        }
    };
    for &flag in &proof.flags {
        let a = next(&hashes)?;
        let b = if flag {
            next(&hashes)?
        } else {
            proof_at += 1;
            *proof.proof.get(proof_at - 1)?
        };
        hashes.push(hash_pair(a, b));
    }
    match hashes.last() {
        Some(root) if proof_at == proof.proof.len() => Some(*root),
        Some(_) => None,
        None => leaves.first().or(proof.proof.first()).copied(),
    }
}

/// Whether `proof` shows that `(project_id, cid)` is a leaf under `root`.
pub fn verify(root: B256, project_id: &str, cid: &str, proof: &[B256]) -> bool {
    proof.iter().fold(leaf(project_id, cid), |at, sibling| hash_pair(at, *sibling)) == root
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_multiproves_against_the_root_and_a_changed_leaf_does_not() {
        for n in 1..=13usize {
            let ids: Vec<String> = (0..n).map(|i| format!("p{i:02}")).collect();
            let cids: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
            let tree = Tree::of(ids.iter().map(String::as_str).zip(cids.iter().map(String::as_str))).unwrap();
            for a in 0..n {
                for b in a + 1..=n {
                    let proof = tree.multiproof(a..b).unwrap();
                    let leaves: Vec<B256> = (a..b).map(|i| leaf(&ids[i], &cids[i])).collect();
                    assert_eq!(multiproof_root(&leaves, &proof), Some(tree.root()), "n {n}, {a}..{b}");
                    let mut wrong = leaves.clone();
                    wrong[0] = leaf(&ids[a], "forged");
                    assert_ne!(multiproof_root(&wrong, &proof), Some(tree.root()), "n {n}, {a}..{b} forged");
                    // One leaf short, or one more: the lengths no longer add up.
                    assert_eq!(multiproof_root(&leaves[1..], &proof), None);
                    let mut more = leaves.clone();
                    more.push(leaves[0]);
                    assert_eq!(multiproof_root(&more, &proof), None);
                }
            }
            assert_eq!(tree.multiproof(0..0), None);
            assert_eq!(tree.multiproof(0..n + 1), None);
        }
    }

    #[test]
    fn every_leaf_proves_against_the_root_and_nothing_else_does() {
        for n in 1..=9 {
            let pairs: Vec<(String, String)> = (0..n).map(|i| (format!("p{i}"), format!("bafy{i}"))).collect();
            let tree = Tree::of(pairs.iter().map(|(p, c)| (p.as_str(), c.as_str()))).unwrap();
            for (i, (p, c)) in pairs.iter().enumerate() {
                let proof = tree.proof(i).unwrap();
                assert!(verify(tree.root(), p, c, &proof), "n={n} leaf {i}");
                assert!(!verify(tree.root(), p, "bafyOther", &proof), "n={n} leaf {i} with another CID");
            }
            assert!(tree.proof(n).is_none());
        }
    }

    #[test]
    fn the_root_does_not_depend_on_the_order_given_and_refuses_a_project_twice() {
        let a = Tree::of([("b", "2"), ("a", "1"), ("c", "3")]).unwrap();
        let b = Tree::of([("a", "1"), ("b", "2"), ("c", "3")]).unwrap();
        assert_eq!(a.root(), b.root());
        assert_ne!(a.root(), Tree::of([("a", "1"), ("b", "2"), ("c", "4")]).unwrap().root());
        assert!(Tree::of([("a", "1"), ("a", "2")]).unwrap_err().contains("project a appears twice"));
        assert_eq!(Tree::of([]).unwrap().root(), keccak256([]));
    }

    /// The same root as OpenZeppelin's library gives
    /// (`StandardMerkleTree.of([["a:x","bafy1"],["b:y","bafy2"],["c:z","bafy3"]], ["string","string"], {sortLeaves: false}).root`,
    /// @openzeppelin/merkle-tree 1.0.8).
    #[test]
    fn the_root_matches_openzeppelins_standard_tree() {
        let tree = Tree::of([("a:x", "bafy1"), ("b:y", "bafy2"), ("c:z", "bafy3")]).unwrap();
        assert_eq!(tree.root().to_string(), OZ_ROOT);
        let proof: Vec<String> = tree.proof(1).unwrap().iter().map(ToString::to_string).collect();
        assert_eq!(proof, OZ_PROOF_1);
    }

    const OZ_ROOT: &str = "0xef4cbccab3d1b41120e7cec5b5e8ebe92d79920bd24756a17d549b7711cafaaa";
    /// Its `getProof(1)`.
    const OZ_PROOF_1: [&str; 2] = [
        "0xadad87ef7aadaa5f70a879fbf23107555eca9322abf2a08e619826442268c1e1",
        "0x8c4b7df636629afc89bd326a9cc6ad96db5f5e5d0cab626bb95630423cdd8c58",
    ];
}
