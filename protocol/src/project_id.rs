//! Project ids (docs/protocol.md §3): what a snapshot is about, as the
//! collector and validators key it.

/// `{project_type}:{data source}:{namespace}`: no data source →
/// `{project_type}:{namespace}`; a data source `a_b` has both halves
/// lower-cased.
pub fn project_id(project_type: &str, data_source: &str, namespace: &str) -> String {
    if data_source.is_empty() {
        format!("{project_type}:{namespace}")
    } else {
        let ds: Vec<String> = data_source.split('_').map(str::to_lowercase).collect();
        format!("{project_type}:{}:{namespace}", ds.join("_"))
    }
}

/// `0x` and 40 hex digits in either case: an address as an operator or a
/// projects list may write it.
pub fn is_address(s: &str) -> bool {
    s.len() == 42 && s.starts_with("0x") && s[2..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// `0x` and 40 lower-case hex digits: a pool as a data source, the form a
/// node writes and a collector takes.
pub fn is_pool_address(s: &str) -> bool {
    is_address(s) && !s[2..].bytes().any(|b| b.is_ascii_uppercase())
}

/// The first two data sources in `sources` that name one project (equal
/// once lower-cased, as [`project_id`] keys them), in their order: a
/// processor returns at most one snapshot per data source per epoch, since
/// the collector, the validators and the finalized batch keep one CID per
/// project id.
pub fn repeated_data_source<'a>(sources: impl IntoIterator<Item = &'a str>) -> Option<(&'a str, &'a str)> {
    let mut seen = std::collections::HashMap::new();
    for source in sources {
        if let Some(first) = seen.insert(project_id("", source, ""), source) {
            return Some((first, source));
        }
    }
    None
}

/// What a processor that returned two snapshots for one data source is
/// told (the node, `compute run` and the devnet word it alike).
pub fn repeated_data_source_error(project_type: &str, first: &str, second: &str) -> String {
    let which = if first == second {
        format!("data source `{first}`")
    } else {
        format!("`{first}` and `{second}`, one project id ({})", project_id(project_type, second, "…"))
    };
    format!(
        "returned two snapshots for {which}: one snapshot per data source per epoch (the collector keeps one CID \
         per project id)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_data_source_is_found_whatever_its_case() {
        assert_eq!(repeated_data_source(["0xaa", "0xbb"]), None);
        assert_eq!(repeated_data_source(["0xAA", "0xbb", "0xaa"]), Some(("0xAA", "0xaa")));
        assert_eq!(repeated_data_source(["", ""]), Some(("", "")));
        let e = repeated_data_source_error("t", "0xAA", "0xaa");
        assert!(e.contains("`0xAA` and `0xaa`, one project id (t:0xaa:…): one snapshot per data source"), "{e}");
    }

    #[test]
    fn addresses_and_pool_addresses() {
        let lower = "0x88e6a0c2ddd26feeb64f039a2c41296fcb3f5640";
        let mixed = "0x88e6A0c2dDD26FEEb64F039a2c41296FcB3f5640";
        assert!(is_address(lower) && is_address(mixed));
        assert!(is_pool_address(lower) && !is_pool_address(mixed));
        for bad in ["", "0x", &lower[..41], &format!("{lower}0"), &lower.replace("0x", "0X"), &lower.replace('e', "g")]
        {
            assert!(!is_address(bad) && !is_pool_address(bad), "{bad}");
        }
    }

    #[test]
    fn project_ids() {
        assert_eq!(
            project_id("baseSnapshot", "0xAbC", "devnet-UNISWAPV3-ETH"),
            "baseSnapshot:0xabc:devnet-UNISWAPV3-ETH"
        );
        assert_eq!(project_id("t", "", "ns"), "t:ns");
        assert_eq!(project_id("t", "0xAA_0xBb", "ns"), "t:0xaa_0xbb:ns");
    }
}
