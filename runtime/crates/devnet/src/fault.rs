//! `--fault` drills: one enum that knows how it is written
//! ([`std::str::FromStr`]), whether it fits the devnet it is given to
//! ([`Fault::check`]), the alert drill it puts on a node's environment
//! ([`Fault::drill_for`]), and what it does around an epoch's release
//! ([`Fault::before_release`], [`Fault::after_release`]) on the chain, the
//! nodes, the validators and the gossip links ([`Targets`]).
//!
//! A new drill is a variant here and its arms; the full node's drills act in
//! `FullNode::after_release` (`fullnode.rs`), and the mid-burst kills are
//! armed on the collector as the devnet starts. Each kind has a parse case
//! below, and the devnet's integration tests run most drills
//! (`runtime/tests/it/devnet.rs`).

use std::time::Duration;

use crate::{Options, process::AnvilProcess};

/// A `--fault` drill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `compute-error:SLOT`, `empty-return:SLOT`: that node's selected computes fail.
    Drill(u64, lite_node_config::Drill),
    /// `kill-node:SLOT@EPOCH`: that node is SIGKILLed right after the epoch's release.
    KillNode { slot: u64, epoch: u64 },
    /// `kill-node-mid-burst:SLOT@EPOCH`: the collector holds back its
    /// answers to that node's submissions of the epoch, and the node is
    /// SIGKILLed once the first has arrived (then a block is mined): messages
    /// sent and unanswered, others in flight.
    /// `lose-power-mid-burst:SLOT@EPOCH`: the same, and then (`power_loss`)
    /// the lines of the epoch its ledgers had not synced — every `sending`
    /// line without an answer — are taken off, as a power loss would have
    /// lost them, before it is started again.
    KillNodeMidBurst { slot: u64, epoch: u64, power_loss: bool },
    /// `stall-anvil:SECS@EPOCH`: both chains' anvils stop answering for SECS right after the epoch's release.
    StallAnvil { secs: u64, epoch: u64 },
    /// `restart-redis@EPOCH`: the validator's Redis is stopped (SIGTERM, so
    /// its append-only file is complete) and started again right after the
    /// epoch's release.
    RestartRedis { epoch: u64 },
    /// `kill-validator:N@EPOCH`: validator N (1, 2, …) is SIGKILLed right
    /// after the epoch's release (the devnet starts it again).
    KillValidator { validator: u64, epoch: u64 },
    /// `cut-validator:N@FROM..TO`: validator N is cut off the gossip mesh
    /// right after epoch FROM's release (its connections closed, new ones
    /// refused, as a blocked port would) and joins again before epoch TO + 1
    /// is released: it misses epochs FROM..=TO.
    CutValidator { validator: u64, from: u64, to: u64 },
    /// `kill-worker:K@EPOCH`: the full node's worker K is SIGKILLed right
    /// after the epoch's release (started again once the epoch is settled).
    KillWorker { worker: u64, epoch: u64 },
    /// `stop-worker:K@EPOCH`: the full node's worker K is SIGSTOPped once it
    /// holds items of the epoch, and continued (SIGCONT) once the others
    /// have finished them: its late results meet the fence.
    StopWorker { worker: u64, epoch: u64 },
    /// `break-worker:K@EPOCH`: from the epoch's release, the full node's
    /// worker K can no longer reach the source chain (the relay in front of
    /// its RPC closes every connection and refuses new ones) though it stays
    /// a live member: its shares fail until it steps aside and the others
    /// take them.
    BreakWorker { worker: u64, epoch: u64 },
    /// `restart-cluster-redis@EPOCH`: the full node's Redis is stopped
    /// (SIGTERM: its append-only file complete) and started again right
    /// after the epoch's release, while the workers compute.
    RestartClusterRedis { epoch: u64 },
    /// `kill-coordinator@EPOCH`: the full node's coordinator is SIGKILLed
    /// mid-gather — once it has opened the epoch on its board, while the
    /// workers compute — and restarted by the devnet: it resumes the epoch
    /// from Redis.
    KillCoordinator { epoch: u64 },
    /// `flush-cluster-redis@EPOCH`: the full node's Redis loses everything
    /// it holds (`FLUSHALL`) once the coordinator has opened the epoch, while
    /// the workers compute: the coordinator opens it again, the workers'
    /// results under lost tokens are refused, and every pool is computed.
    FlushClusterRedis { epoch: u64 },
}

/// Parses `--fault KIND:SLOT` (`compute-error:1`, `empty-return:2`),
/// `kill-node:SLOT@EPOCH`, `kill-node-mid-burst:SLOT@EPOCH`,
/// `lose-power-mid-burst:SLOT@EPOCH`, `stall-anvil:SECONDS@EPOCH`,
/// `restart-redis@EPOCH`, `kill-validator:N@EPOCH` or
/// `cut-validator:N@FROM..TO`.
pub fn parse_fault(s: &str) -> Result<Fault, String> {
    s.parse()
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(epoch) = s.strip_prefix("kill-coordinator@") {
            let epoch = epoch.parse().map_err(|_| format!("--fault {s}: `{epoch}` is not an epoch id"))?;
            return Ok(Fault::KillCoordinator { epoch });
        }
        if let Some(epoch) = s.strip_prefix("flush-cluster-redis@") {
            let epoch = epoch.parse().map_err(|_| format!("--fault {s}: `{epoch}` is not an epoch id"))?;
            return Ok(Fault::FlushClusterRedis { epoch });
        }
        if let Some(epoch) = s.strip_prefix("restart-cluster-redis@") {
            let epoch = epoch.parse().map_err(|_| format!("--fault {s}: `{epoch}` is not an epoch id"))?;
            return Ok(Fault::RestartClusterRedis { epoch });
        }
        if let Some(epoch) = s.strip_prefix("restart-redis@") {
            let epoch = epoch.parse().map_err(|_| format!("--fault {s}: `{epoch}` is not an epoch id"))?;
            return Ok(Fault::RestartRedis { epoch });
        }
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| format!("--fault {s}: expected KIND:SLOT (e.g. compute-error:1) or kill-node:SLOT@EPOCH"))?;
        let number = |n: &str, what: &str| n.parse::<u64>().map_err(|_| format!("--fault {s}: `{n}` is not {what}"));
        if ["kill-node", "kill-node-mid-burst", "lose-power-mid-burst"].contains(&kind) {
            let (slot, epoch) =
                rest.split_once('@').ok_or_else(|| format!("--fault {s}: expected {kind}:SLOT@EPOCH"))?;
            let (slot, epoch) = (number(slot, "a slot number")?, number(epoch, "an epoch id")?);
            return Ok(if kind == "kill-node" {
                Fault::KillNode { slot, epoch }
            } else {
                Fault::KillNodeMidBurst { slot, epoch, power_loss: kind == "lose-power-mid-burst" }
            });
        }
        if kind == "kill-worker" || kind == "stop-worker" || kind == "break-worker" {
            let (w, epoch) = rest.split_once('@').ok_or_else(|| format!("--fault {s}: expected {kind}:K@EPOCH"))?;
            let (worker, epoch) = (number(w, "a worker number (1, 2, …)")?, number(epoch, "an epoch id")?);
            return Ok(match kind {
                "kill-worker" => Fault::KillWorker { worker, epoch },
                "stop-worker" => Fault::StopWorker { worker, epoch },
                _ => Fault::BreakWorker { worker, epoch },
            });
        }
        if kind == "kill-validator" {
            let (v, epoch) =
                rest.split_once('@').ok_or_else(|| format!("--fault {s}: expected kill-validator:N@EPOCH"))?;
            let validator = number(v, "a validator number (1, 2, …)")?;
            return Ok(Fault::KillValidator { validator, epoch: number(epoch, "an epoch id")? });
        }
        if kind == "cut-validator" {
            let expected = || format!("--fault {s}: expected cut-validator:N@FROM..TO (epoch ids, FROM <= TO)");
            let (v, epochs) = rest.split_once('@').ok_or_else(expected)?;
            let (from, to) = epochs.split_once("..").ok_or_else(expected)?;
            let validator = number(v, "a validator number (1, 2, …)")?;
            let (from, to) = (number(from, "an epoch id")?, number(to, "an epoch id")?);
            if from > to {
                return Err(expected());
            }
            return Ok(Fault::CutValidator { validator, from, to });
        }
        if kind == "stall-anvil" {
            let (secs, epoch) =
                rest.split_once('@').ok_or_else(|| format!("--fault {s}: expected stall-anvil:SECONDS@EPOCH"))?;
            let (secs, epoch) = (number(secs, "a number of seconds")?, number(epoch, "an epoch id")?);
            return Ok(Fault::StallAnvil { secs, epoch });
        }
        let drill = kind.parse().map_err(|e: String| {
            format!(
                "{e}, or kill-node:SLOT@EPOCH, or kill-node-mid-burst:SLOT@EPOCH, or lose-power-mid-burst:SLOT@EPOCH, or \
                 stall-anvil:SECONDS@EPOCH, or restart-redis@EPOCH, or \
                 kill-validator:N@EPOCH, or cut-validator:N@FROM..TO, or kill-worker:K@EPOCH, or \
                 stop-worker:K@EPOCH, or restart-cluster-redis@EPOCH, or flush-cluster-redis@EPOCH, or \
                 kill-coordinator@EPOCH"
            )
        })?;
        Ok(Fault::Drill(number(rest, "a slot number")?, drill))
    }
}

/// What a fault acts on after a release: the chain, the nodes' processes
/// and the validators.
pub(crate) struct Targets<'a> {
    /// Both chains' anvils (source, anchor).
    pub anvils: [&'a mut AnvilProcess; 2],
    pub nodes: &'a mut [crate::Node],
    pub validators: &'a mut [crate::validator::DevnetValidator],
    pub switch: &'a mut crate::switch::Switch,
}

impl Fault {
    /// Why this fault does not fit the devnet `opts` describes, if it does not.
    pub(crate) fn check(&self, opts: &Options) -> Option<String> {
        let slot = match *self {
            Self::KillNode { slot, .. } if opts.full_node_workers > 0 && slot == opts.our_slots() + 1 => return None,
            Self::Drill(slot, _) | Self::KillNode { slot, .. } | Self::KillNodeMidBurst { slot, .. } => slot,
            Self::KillWorker { worker, .. } | Self::StopWorker { worker, .. } | Self::BreakWorker { worker, .. } => {
                return (worker == 0 || worker > opts.full_node_workers).then(|| {
                    format!(
                        "--fault worker {worker}: the full node has workers 1..={} (--full-node-workers)",
                        opts.full_node_workers
                    )
                });
            }
            Self::RestartClusterRedis { .. } | Self::FlushClusterRedis { .. } | Self::KillCoordinator { .. } => {
                return (opts.full_node_workers == 0).then(|| {
                    "--fault restart-cluster-redis, flush-cluster-redis and kill-coordinator need --full-node-workers"
                        .to_owned()
                });
            }
            Self::StallAnvil { .. } => return None,
            Self::RestartRedis { .. } => {
                return (opts.validators == 0).then(|| "--fault restart-redis needs --validators 1".to_owned());
            }
            Self::KillValidator { validator, .. } | Self::CutValidator { validator, .. } => {
                let kind = if matches!(self, Self::KillValidator { .. }) { "kill" } else { "cut" };
                return (validator == 0 || validator > opts.validators).then(|| {
                    format!("--fault {kind}-validator:{validator}: the devnet has validators 1..={}", opts.validators)
                });
            }
        };
        (slot == 0 || slot > opts.our_slots()).then(|| {
            let full = if opts.full_node_workers > 0 {
                format!(" (or {}, the full node's)", opts.our_slots() + 1)
            } else {
                String::new()
            };
            format!("--fault slot {slot} is not one of the devnet's slots 1..={}{full}", opts.our_slots())
        })
    }

    /// The alert drill this fault puts on a node working `slots`, if any.
    pub(crate) fn drill_for(&self, slots: &[u64]) -> Option<lite_node_config::Drill> {
        match *self {
            Self::Drill(slot, drill) if slots.contains(&slot) => Some(drill),
            _ => None,
        }
    }

    /// What the fault does right before epoch `epoch_id`'s release (before
    /// the devnet waits for every validator not cut off to listen).
    pub(crate) fn before_release(&self, epoch_id: u64, targets: &mut Targets<'_>) {
        if let Self::CutValidator { validator, to, .. } = *self
            && to + 1 == epoch_id
            && let Some(v) = targets.validators.get_mut(validator as usize - 1)
        {
            tracing::info!("drill: validator {validator} joins the mesh again before epoch {epoch_id}'s release");
            v.cut_off = false;
            targets.switch.set_cut(v.index, false);
        }
    }

    /// What the fault does right after epoch `epoch_id`'s release.
    pub(crate) fn after_release(&self, epoch_id: u64, targets: &mut Targets<'_>) {
        match *self {
            Self::StallAnvil { secs, epoch } if epoch == epoch_id => {
                tracing::info!("drill: both anvils stall for {secs}s after epoch {epoch}'s release");
                for anvil in targets.anvils.iter_mut() {
                    anvil.process.stall(Duration::from_secs(secs));
                }
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
            Self::CutValidator { validator, from, .. } if from == epoch_id => {
                if let Some(v) = targets.validators.get_mut(validator as usize - 1) {
                    tracing::info!("drill: validator {validator} is cut off the mesh after epoch {epoch_id}'s release");
                    // Released as it is cut: not watched whole.
                    v.unwatched.insert(epoch_id);
                    v.cut_off = true;
                    targets.switch.set_cut(v.index, true);
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
        assert_eq!(
            "kill-node-mid-burst:4@2".parse::<Fault>(),
            Ok(Fault::KillNodeMidBurst { slot: 4, epoch: 2, power_loss: false })
        );
        assert_eq!(
            "lose-power-mid-burst:4@2".parse::<Fault>(),
            Ok(Fault::KillNodeMidBurst { slot: 4, epoch: 2, power_loss: true })
        );
        assert_eq!("stall-anvil:5@2".parse::<Fault>(), Ok(Fault::StallAnvil { secs: 5, epoch: 2 }));
        assert_eq!("restart-redis@8".parse::<Fault>(), Ok(Fault::RestartRedis { epoch: 8 }));
        assert_eq!("kill-validator:2@5".parse::<Fault>(), Ok(Fault::KillValidator { validator: 2, epoch: 5 }));
        assert_eq!("cut-validator:3@4..5".parse::<Fault>(), Ok(Fault::CutValidator { validator: 3, from: 4, to: 5 }));
        let e = "cut-validator:3@5..4".parse::<Fault>().unwrap_err();
        assert!(e.contains("FROM <= TO"), "{e}");
        let e = "cut-validator:3@5".parse::<Fault>().unwrap_err();
        assert!(e.contains("expected cut-validator:N@FROM..TO"), "{e}");
        assert!("restart-redis@x".parse::<Fault>().unwrap_err().contains("`x` is not an epoch id"));
        assert_eq!("kill-worker:2@3".parse::<Fault>(), Ok(Fault::KillWorker { worker: 2, epoch: 3 }));
        assert_eq!("stop-worker:1@2".parse::<Fault>(), Ok(Fault::StopWorker { worker: 1, epoch: 2 }));
        assert_eq!("break-worker:2@3".parse::<Fault>(), Ok(Fault::BreakWorker { worker: 2, epoch: 3 }));
        assert_eq!("restart-cluster-redis@4".parse::<Fault>(), Ok(Fault::RestartClusterRedis { epoch: 4 }));
        assert_eq!("kill-coordinator@5".parse::<Fault>(), Ok(Fault::KillCoordinator { epoch: 5 }));
        assert_eq!("flush-cluster-redis@6".parse::<Fault>(), Ok(Fault::FlushClusterRedis { epoch: 6 }));
        assert!("stop-worker:1".parse::<Fault>().unwrap_err().contains("expected stop-worker:K@EPOCH"));
        let e = "kill-node:1".parse::<Fault>().unwrap_err();
        assert!(e.contains("expected kill-node:SLOT@EPOCH"), "{e}");
        let e = "melt:1".parse::<Fault>().unwrap_err();
        assert!(e.contains("or stall-anvil:SECONDS@EPOCH"), "{e}");
        let e = "compute-error:x".parse::<Fault>().unwrap_err();
        assert!(e.contains("`x` is not a slot number"), "{e}");
    }
}
