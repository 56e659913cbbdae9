//! `--fault` drills: one enum that knows how it is written
//! ([`std::str::FromStr`]), whether it fits the devnet it is given to
//! ([`Fault::check`]), what it does to a node's environment
//! ([`Fault::node_env`]), and what it does after an epoch's release
//! ([`Fault::after_release`]). A new drill is a variant here and its arms.

use std::time::Duration;

use crate::{Options, process::AnvilProcess};

/// A `--fault` drill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `compute-error:SLOT`, `empty-return:SLOT`: that node's selected computes fail.
    Drill(u64, lite_node_config::Drill),
    /// `kill-node:SLOT@EPOCH`: that node is SIGKILLed right after the epoch's release.
    KillNode { slot: u64, epoch: u64 },
    /// `stall-anvil:SECS@EPOCH`: anvil stops answering for SECS right after the epoch's release.
    StallAnvil { secs: u64, epoch: u64 },
    /// `restart-redis@EPOCH`: the validator's Redis is stopped (SIGTERM, so
    /// its append-only file is complete) and started again right after the
    /// epoch's release.
    RestartRedis { epoch: u64 },
    /// `kill-validator:N@EPOCH`: validator N (1, 2, …) is SIGKILLed right
    /// after the epoch's release (the devnet starts it again).
    KillValidator { validator: u64, epoch: u64 },
}

/// Parses `--fault KIND:SLOT` (`compute-error:1`, `empty-return:2`),
/// `kill-node:SLOT@EPOCH`, `stall-anvil:SECONDS@EPOCH` or
/// `restart-redis@EPOCH`.
pub fn parse_fault(s: &str) -> Result<Fault, String> {
    s.parse()
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(epoch) = s.strip_prefix("restart-redis@") {
            let epoch = epoch.parse().map_err(|_| format!("--fault {s}: `{epoch}` is not an epoch id"))?;
            return Ok(Fault::RestartRedis { epoch });
        }
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| format!("--fault {s}: expected KIND:SLOT (e.g. compute-error:1) or kill-node:SLOT@EPOCH"))?;
        let number = |n: &str, what: &str| n.parse::<u64>().map_err(|_| format!("--fault {s}: `{n}` is not {what}"));
        if kind == "kill-node" {
            let (slot, epoch) =
                rest.split_once('@').ok_or_else(|| format!("--fault {s}: expected kill-node:SLOT@EPOCH"))?;
            return Ok(Fault::KillNode { slot: number(slot, "a slot number")?, epoch: number(epoch, "an epoch id")? });
        }
        if kind == "kill-validator" {
            let (v, epoch) =
                rest.split_once('@').ok_or_else(|| format!("--fault {s}: expected kill-validator:N@EPOCH"))?;
            let validator = number(v, "a validator number (1, 2, …)")?;
            return Ok(Fault::KillValidator { validator, epoch: number(epoch, "an epoch id")? });
        }
        if kind == "stall-anvil" {
            let (secs, epoch) =
                rest.split_once('@').ok_or_else(|| format!("--fault {s}: expected stall-anvil:SECONDS@EPOCH"))?;
            let (secs, epoch) = (number(secs, "a number of seconds")?, number(epoch, "an epoch id")?);
            return Ok(Fault::StallAnvil { secs, epoch });
        }
        let drill = kind.parse().map_err(|e: String| {
            format!(
                "{e}, or kill-node:SLOT@EPOCH, or stall-anvil:SECONDS@EPOCH, or restart-redis@EPOCH, or \
                 kill-validator:N@EPOCH"
            )
        })?;
        Ok(Fault::Drill(number(rest, "a slot number")?, drill))
    }
}

/// What a fault acts on after a release: the chain, the nodes' processes
/// and the validators.
pub(crate) struct Targets<'a> {
    pub anvil: &'a mut AnvilProcess,
    pub nodes: &'a mut [crate::Node],
    pub validators: &'a mut [crate::validator::DevnetValidator],
}

impl Fault {
    /// Why this fault does not fit the devnet `opts` describes, if it does not.
    pub(crate) fn check(&self, opts: &Options) -> Option<String> {
        let slot = match *self {
            Self::Drill(slot, _) | Self::KillNode { slot, .. } => slot,
            Self::StallAnvil { .. } => return None,
            Self::RestartRedis { .. } => {
                return (opts.validators == 0).then(|| "--fault restart-redis needs --validators 1".to_owned());
            }
            Self::KillValidator { validator, .. } => {
                return (validator == 0 || validator > opts.validators).then(|| {
                    format!("--fault kill-validator:{validator}: the devnet has validators 1..={}", opts.validators)
                });
            }
        };
        (slot == 0 || slot > opts.our_slots())
            .then(|| format!("--fault slot {slot} is not one of the devnet's slots 1..={}", opts.our_slots()))
    }

    /// The alert drill this fault puts on a node working `slots`, if any.
    pub(crate) fn drill_for(&self, slots: &[u64]) -> Option<lite_node_config::Drill> {
        match *self {
            Self::Drill(slot, drill) if slots.contains(&slot) => Some(drill),
            _ => None,
        }
    }

    /// What the fault does right after epoch `epoch_id`'s release.
    pub(crate) fn after_release(&self, epoch_id: u64, targets: &mut Targets<'_>) {
        match *self {
            Self::StallAnvil { secs, epoch } if epoch == epoch_id => {
                tracing::info!("drill: anvil stalls for {secs}s after epoch {epoch}'s release");
                targets.anvil.process.stall(Duration::from_secs(secs));
            }
            Self::KillNode { slot, epoch } if epoch == epoch_id => {
                if let Some(node) = targets.nodes.iter_mut().find(|n| n.slots.contains(&slot)) {
                    tracing::info!("drill: SIGKILL to node {} after epoch {epoch}'s release", node.index);
                    node.process.kill();
                }
            }
            Self::KillValidator { validator, epoch } if epoch == epoch_id => {
                if let Some(v) = targets.validators.get_mut(validator as usize - 1) {
                    tracing::info!("drill: SIGKILL to validator {validator} after epoch {epoch}'s release");
                    v.process.kill();
                }
            }
            Self::RestartRedis { epoch } if epoch == epoch_id => {
                for v in targets.validators.iter_mut() {
                    tracing::info!("drill: the validator's Redis restarts after epoch {epoch}'s release");
                    if let Err(e) = v.restart_redis() {
                        tracing::error!("drill: the validator's Redis did not restart: {e:#}");
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_parses_and_a_bad_one_is_named() {
        assert_eq!("compute-error:2".parse::<Fault>(), Ok(Fault::Drill(2, lite_node_config::Drill::ComputeError)));
        assert_eq!("kill-node:1@3".parse::<Fault>(), Ok(Fault::KillNode { slot: 1, epoch: 3 }));
        assert_eq!("stall-anvil:5@2".parse::<Fault>(), Ok(Fault::StallAnvil { secs: 5, epoch: 2 }));
        assert_eq!("restart-redis@8".parse::<Fault>(), Ok(Fault::RestartRedis { epoch: 8 }));
        assert_eq!("kill-validator:2@5".parse::<Fault>(), Ok(Fault::KillValidator { validator: 2, epoch: 5 }));
        assert!("restart-redis@x".parse::<Fault>().unwrap_err().contains("`x` is not an epoch id"));
        let e = "kill-node:1".parse::<Fault>().unwrap_err();
        assert!(e.contains("expected kill-node:SLOT@EPOCH"), "{e}");
        let e = "melt:1".parse::<Fault>().unwrap_err();
        assert!(e.contains("or stall-anvil:SECONDS@EPOCH"), "{e}");
        let e = "compute-error:x".parse::<Fault>().unwrap_err();
        assert!(e.contains("`x` is not a slot number"), "{e}");
    }
}
