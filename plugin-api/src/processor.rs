//! Processors: the unit of compute a project in projects.json names.

use abi_stable::{
    StableAbi, sabi_trait,
    sabi_trait::prelude::TD_Opaque,
    std_types::{RBox, ROption, RResult, RSlice, RString, RVec},
};

use crate::{
    epoch::EpochContext,
    guard::guarded,
    host::{Host, HostRef},
};

/// One result of a compute: the data source it is about and its snapshot.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The data source (e.g. a pool address), or empty for none. It becomes
    /// part of the project id.
    pub data_source: RString,
    /// The snapshot as JSON text; the runtime canonicalizes it.
    pub json: RString,
}

impl Snapshot {
    /// A snapshot of `data_source` (empty for none) with its JSON text.
    ///
    /// The node submits it under the project id
    /// `{project_type}:{data_source}:{namespace}` (data source lower-cased;
    /// `{project_type}:{namespace}` without one). A data source is empty or
    /// a pool address (`0x` and 40 hex digits; several joined by `_`): the
    /// collector refuses any other, and accepts an address only from a slot
    /// the market's selection assigned that very pool for the epoch. One
    /// snapshot per data source per epoch: two for one data source fail the
    /// compute. `lite-node compute run` checks all of this as the collector
    /// would.
    pub fn new(data_source: impl Into<String>, json: impl Into<String>) -> Self {
        Self { data_source: RString::from(data_source.into()), json: RString::from(json.into()) }
    }
}

/// A processor as it crosses the boundary (stable ABI).
#[sabi_trait]
pub trait Processor: Send + Sync {
    /// Computes the epoch. An empty list means "nothing to submit".
    fn compute(&self, epoch: &EpochContext, host: HostRef<'_>) -> RResult<RVec<Snapshot>, RString>;

    /// The data sources the epoch's work divides into, in a fixed order;
    /// `None` when it cannot be divided (it runs whole).
    fn data_sources(&self, epoch: &EpochContext, host: HostRef<'_>) -> RResult<ROption<RVec<RString>>, RString>;

    /// Computes only `sources` (some of what `data_sources` gave).
    #[sabi(last_prefix_field)]
    fn compute_share(
        &self,
        epoch: &EpochContext,
        host: HostRef<'_>,
        sources: RSlice<'_, RString>,
    ) -> RResult<RVec<Snapshot>, RString>;
}

/// An owned processor instance, as returned by the module.
pub type ProcessorBox = Processor_TO<'static, RBox<()>>;

/// What compute authors implement: plain Rust, no ABI types to juggle.
///
/// One instance serves its project for as long as the node runs: it is
/// built once from the project's settings and then called for every epoch,
/// and for every slot when the node works several, possibly from several
/// threads at once (at most `LITE_NODE_MAX_CONCURRENT_COMPUTES`, 4 by
/// default) — keep state behind a lock, or none. Each call runs on a
/// blocking thread of its own, so blocking I/O through the [`Host`] is fine.
/// A call has `LITE_NODE_COMPUTE_TIMEOUT_SECS` (60 s by default): past it
/// the epoch fails for this project, the thread is left to finish (it cannot
/// be stopped) and counts as hung until it returns. A panic is caught and
/// becomes the epoch's error, naming the processor.
pub trait ComputeProcessor: Send + Sync + 'static {
    /// Computes one epoch. Report the selection decision through
    /// `host.report_selection` before doing any work; return an empty list
    /// when this slot has nothing to do.
    fn compute(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Vec<Snapshot>, String>;

    /// The data sources this epoch's work divides into (a full node's
    /// pools, say), in an order that is the same on every machine, so that
    /// a full node can spread them over workers. `None`, the default: the
    /// work cannot be divided, and the processor runs whole (with
    /// [`ComputeProcessor::compute`]).
    fn data_sources(&self, epoch: &EpochContext, host: &Host<'_>) -> Result<Option<Vec<String>>, String> {
        let _ = (epoch, host);
        Ok(None)
    }

    /// Computes only `sources`, some of what
    /// [`ComputeProcessor::data_sources`] gave for this epoch: one snapshot
    /// per source, each **byte-identical** to the one computing them all at
    /// once gives (the node may split the sources any way, over machines).
    /// Check it with [`crate::testing::check_shares`]. Needed only when
    /// `data_sources` divides the work.
    fn compute_share(
        &self,
        epoch: &EpochContext,
        host: &Host<'_>,
        sources: &[String],
    ) -> Result<Vec<Snapshot>, String> {
        let _ = (epoch, host, sources);
        Err("this processor does not compute shares of its data sources (data_sources gives none)".into())
    }
}

/// Something a processor needs the node to prepare for every epoch: a
/// preload task its project must list in projects.json (`preload_tasks`).
/// `lite-node check` and the node's start refuse a project that lacks one,
/// rather than letting every epoch fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// [`Host::block_details`]: the epoch's blocks (`"block_details"`).
    BlockDetails,
}

impl Need {
    /// The preload task's name in projects.json.
    pub fn preload_task(self) -> &'static str {
        match self {
            Self::BlockDetails => "block_details",
        }
    }
}

/// How a processor is listed and built.
#[derive(Clone, Copy)]
pub struct ProcessorSpec {
    /// The name projects.json uses in `processor.class_name`.
    pub class_name: &'static str,
    /// One line for `lite-node compute list`.
    pub description: &'static str,
    /// What the node must prepare for it (`&[]` for nothing).
    pub needs: &'static [Need],
    /// Builds an instance from the project's settings (JSON object text).
    pub new: fn(settings_json: &str) -> Result<Box<dyn ComputeProcessor>, String>,
}

impl std::fmt::Debug for ProcessorSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorSpec").field("class_name", &self.class_name).finish_non_exhaustive()
    }
}

/// Adapts a [`ComputeProcessor`] to the boundary, catching panics.
struct Guarded {
    class_name: &'static str,
    inner: Box<dyn ComputeProcessor>,
}

impl Processor for Guarded {
    fn compute(&self, epoch: &EpochContext, host: HostRef<'_>) -> RResult<RVec<Snapshot>, RString> {
        let host = Host::new(host);
        guarded(self.class_name, || self.inner.compute(epoch, &host)).map(RVec::from).map_err(RString::from).into()
    }

    fn data_sources(&self, epoch: &EpochContext, host: HostRef<'_>) -> RResult<ROption<RVec<RString>>, RString> {
        let host = Host::new(host);
        guarded(self.class_name, || self.inner.data_sources(epoch, &host))
            .map(|sources| ROption::from(sources.map(|s| s.into_iter().map(RString::from).collect())))
            .map_err(RString::from)
            .into()
    }

    fn compute_share(
        &self,
        epoch: &EpochContext,
        host: HostRef<'_>,
        sources: RSlice<'_, RString>,
    ) -> RResult<RVec<Snapshot>, RString> {
        let host = Host::new(host);
        let sources: Vec<String> = sources.iter().map(|s| s.as_str().to_owned()).collect();
        guarded(self.class_name, || self.inner.compute_share(epoch, &host, &sources))
            .map(RVec::from)
            .map_err(RString::from)
            .into()
    }
}

pub(crate) fn boxed(class_name: &'static str, inner: Box<dyn ComputeProcessor>) -> ProcessorBox {
    Processor_TO::from_value(Guarded { class_name, inner }, TD_Opaque)
}
