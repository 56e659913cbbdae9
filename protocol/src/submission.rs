//! What a well-formed submission is, before any chain state is looked at
//! (docs/protocol.md §3, §5, §6): the checks every collector and validator
//! applies first, so a correctly signed submission with wrong content is
//! refused with its reason.

use alloy::primitives::Address;

use crate::proto::{Request, SnapshotSubmission};

/// The data market and ProtocolState a collector serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    pub data_market: Address,
    pub protocol_state: Address,
}

/// The submission's request when its form is right, else why not: a request
/// is present, the slot id is positive, `snapshotCid` is a CID, `projectId`
/// is `type:namespace` or `type:source:namespace`, and `dataMarket` and
/// `protocolState` are the scope's own.
pub fn check_form<'a>(s: &'a SnapshotSubmission, scope: &Scope) -> Result<&'a Request, String> {
    let r = s.request.as_ref().ok_or("the submission has no request")?;
    if r.slot_id == 0 {
        return Err("slot id 0: slots are numbered from 1".into());
    }
    if cid::Cid::try_from(r.snapshot_cid.as_str()).is_err() {
        return Err(format!("snapshotCid `{}` is not a CID", clip(&r.snapshot_cid)));
    }
    if !project_id_is_well_formed(&r.project_id) {
        return Err(format!(
            "projectId `{}` is not `type:source:namespace` (or `type:namespace`)",
            clip(&r.project_id)
        ));
    }
    let same = |what: &str, given: &str, ours: Address| match given.parse::<Address>() {
        Ok(a) if a == ours => Ok(()),
        Ok(a) => Err(format!("{what} {a} is not this collector's ({ours})")),
        Err(_) => Err(format!("{what} `{}` is not an address", clip(given))),
    };
    same("dataMarket", &s.data_market, scope.data_market)?;
    same("protocolState", &s.protocol_state, scope.protocol_state)?;
    Ok(r)
}

/// Two or three non-empty parts separated by `:`, no white space.
pub fn project_id_is_well_formed(id: &str) -> bool {
    let parts: Vec<&str> = id.split(':').collect();
    (2..=3).contains(&parts.len())
        && parts.iter().all(|p| !p.is_empty() && !p.chars().any(|c| c.is_whitespace() || c.is_control()))
}

/// Untrusted text, shortened for a message.
fn clip(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DM: &str = "0x0000000000000000000000000000000000000001";
    const PS: &str = "0x0000000000000000000000000000000000000002";

    fn scope() -> Scope {
        Scope { data_market: DM.parse().unwrap(), protocol_state: PS.parse().unwrap() }
    }

    fn good() -> SnapshotSubmission {
        SnapshotSubmission {
            request: Some(Request {
                slot_id: 1,
                deadline: 10,
                snapshot_cid: "bafkreicecnx2gvntm6fbcrvnc336qze6st5u7qq7457igegamd3bzkx7ri".into(),
                epoch_id: 3,
                project_id: "baseSnapshot:0xaa:devnet-UNISWAPV3-ETH".into(),
            }),
            signature: String::new(),
            header: String::new(),
            data_market: DM.into(),
            node_version: None,
            protocol_state: PS.into(),
        }
    }

    #[test]
    fn a_good_form_passes_and_each_bad_field_is_named() {
        assert!(check_form(&good(), &scope()).is_ok());
        let bad = |edit: fn(&mut SnapshotSubmission), reason: &str| {
            let mut s = good();
            edit(&mut s);
            let err = check_form(&s, &scope()).unwrap_err();
            assert!(err.contains(reason), "{err}");
        };
        bad(|s| s.request = None, "no request");
        bad(|s| s.request.as_mut().unwrap().slot_id = 0, "slot id 0");
        bad(|s| s.request.as_mut().unwrap().snapshot_cid = "not-a-cid".into(), "`not-a-cid` is not a CID");
        bad(|s| s.request.as_mut().unwrap().project_id = "justone".into(), "projectId `justone`");
        bad(|s| s.request.as_mut().unwrap().project_id = "a:b:c:d".into(), "is not `type:source:namespace`");
        bad(|s| s.request.as_mut().unwrap().project_id = "a: b:c".into(), "is not `type:source:namespace`");
        bad(|s| s.data_market = "0x0000000000000000000000000000000000000009".into(), "dataMarket 0x");
        bad(|s| s.protocol_state = "nope".into(), "protocolState `nope` is not an address");
        assert!(project_id_is_well_formed("blockDetails:devnet-UNISWAPV3-ETH"), "no data source");
    }
}
