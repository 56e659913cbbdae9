//! Who computes which of an epoch's items, as plain functions over what the
//! board holds: by peer index (each member takes its own stride of the
//! items) or by least backlog (the coordinator hands each item to the least
//! busy worker).

use std::collections::BTreeMap;

/// Peer index: the members sorted by id; member `k` of `n` takes the items
/// whose index ≡ k (mod n). `None` when `me` is not a member.
pub fn peer_index_share(members: &[String], me: &str, items: usize) -> Option<Vec<usize>> {
    let mut sorted: Vec<&str> = members.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let k = sorted.iter().position(|m| *m == me)?;
    let n = sorted.len();
    Some((k..items).step_by(n).collect())
}

/// Least backlog: gives each of `items`, in order, to the worker with the
/// fewest items outstanding (ties: the smallest id), counting each
/// assignment as it goes. Nothing when there is no worker.
pub fn least_backlog(items: &[usize], backlog: &mut BTreeMap<String, usize>) -> Vec<(usize, String)> {
    let mut out = Vec::with_capacity(items.len());
    for &item in items {
        let Some((worker, count)) = backlog.iter_mut().min_by_key(|(id, n)| (**n, (*id).clone())) else {
            break;
        };
        *count += 1;
        out.push((item, worker.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("w{i:02}")).collect()
    }

    proptest! {
        /// Every item goes to exactly one member, whatever the order the
        /// members are listed in; shares differ by at most one item.
        #[test]
        fn peer_index_shares_partition_the_items(n in 1usize..12, items in 0usize..2000, rotate in 0usize..12) {
            let mut members = ids(n);
            members.rotate_left(rotate % n);
            let shares: Vec<Vec<usize>> = ids(n).iter().map(|m| peer_index_share(&members, m, items).unwrap()).collect();
            let mut all: Vec<usize> = shares.iter().flatten().copied().collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..items).collect::<Vec<_>>());
            let (lo, hi) = (shares.iter().map(Vec::len).min().unwrap(), shares.iter().map(Vec::len).max().unwrap());
            prop_assert!(hi - lo <= 1);
        }

        /// Least backlog ends with backlogs at most one apart when they start
        /// even, and never gives an item to a busier worker than another.
        #[test]
        fn least_backlog_evens_the_load(n in 1usize..10, start in proptest::collection::vec(0usize..50, 10), items in 0usize..500) {
            let mut backlog: BTreeMap<String, usize> = ids(n).into_iter().zip(start.iter().copied()).collect();
            let before = backlog.clone();
            let given = least_backlog(&(0..items).collect::<Vec<_>>(), &mut backlog);
            prop_assert_eq!(given.len(), items);
            let total: usize = before.values().sum::<usize>() + items;
            prop_assert_eq!(backlog.values().sum::<usize>(), total);
            let max_before = *before.values().max().unwrap();
            let (lo, hi) = (*backlog.values().min().unwrap(), *backlog.values().max().unwrap());
            prop_assert!(hi <= max_before.max(lo + 1), "a busy worker was given more: {:?} → {:?}", before, backlog);
        }
    }

    #[test]
    fn a_member_not_listed_has_no_share_and_no_worker_takes_nothing() {
        assert_eq!(peer_index_share(&ids(3), "w09", 10), None);
        assert_eq!(peer_index_share(&ids(3), "w01", 10), Some(vec![1, 4, 7]));
        assert!(least_backlog(&[1, 2], &mut BTreeMap::new()).is_empty());
    }
}
