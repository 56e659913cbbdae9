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

#[cfg(test)]
mod tests {
    use super::*;

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
