//! The root module every compute library exports.
//!
//! The module is an `abi_stable` prefix type: fields are only ever appended
//! after `#[sabi(last_prefix_field)]`, and the crate version is part of the
//! load-time check, so a library built against another interface is refused
//! with a layout or version error instead of crashing.

use std::sync::OnceLock;

use abi_stable::{
    StableAbi, declare_root_module_statics,
    library::RootModule,
    package_version_strings,
    prefix_type::PrefixTypeTrait,
    sabi_types::VersionStrings,
    std_types::{RResult, RStr, RString, RVec},
};

use crate::{
    guard::guarded,
    processor::{ProcessorBox, ProcessorSpec, boxed},
};

/// A processor a library exports, as `lite-node compute list` shows it.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct ProcessorInfo {
    /// The name projects.json uses in `processor.class_name`.
    pub class_name: RString,
    /// One line describing it.
    pub description: RString,
    /// The preload tasks its project must list (see [`crate::Need`]).
    pub needs: RVec<RString>,
}

/// The question the data market's slot selection answers for one epoch.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct AssignmentRequest {
    /// The epoch asked about.
    pub epoch_id: u64,
    /// The seed block's hash, hex with or without `0x`.
    pub block_hash: RString,
    /// Registered slots (`getTotalNodeCount()`).
    pub total_slots: u64,
    /// Active pools (data sources), as given; the rule sorts them itself.
    pub pools: RVec<RString>,
}

/// One selected slot and the data source it works on.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotAssignment {
    /// The selected slot.
    pub slot_id: u64,
    /// Index into [`Assignments::pools`].
    pub pool: u32,
}

/// The market's answer: the seed and every selected slot, by slot id.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct Assignments {
    /// The epoch's seed, 64 hex digits without `0x`.
    pub seed: RString,
    /// The pools as the rule ordered them, each as given.
    pub pools: RVec<RString>,
    /// Selected slots by slot id (a thousand strings per epoch would cost
    /// more than the selection itself, so pools are referred to by index).
    pub selected: RVec<SlotAssignment>,
}

/// The root module of a compute library.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = ComputeModuleRef)))]
#[sabi(missing_field(panic))]
pub struct ComputeModule {
    /// The plugin-api version the library was compiled against.
    pub api_version: extern "C" fn() -> RStr<'static>,
    /// The processors this library exports.
    pub processors: extern "C" fn() -> RVec<ProcessorInfo>,
    /// Builds the processor named `class_name` with its project settings
    /// (a JSON object as text).
    pub new_processor: extern "C" fn(class_name: RStr<'_>, settings_json: RStr<'_>) -> RResult<ProcessorBox, RString>,
    /// The data market's slot selection for one epoch; `None` when this
    /// library does not implement one.
    #[sabi(last_prefix_field)]
    pub assignments: Option<extern "C" fn(request: &AssignmentRequest) -> RResult<Assignments, RString>>,
}

impl RootModule for ComputeModuleRef {
    declare_root_module_statics! {ComputeModuleRef}
    const BASE_NAME: &'static str = "lite_node_compute";
    const NAME: &'static str = "lite_node_compute";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// A slot-assignment rule as a compute package implements it.
pub type AssignmentFn = fn(&AssignmentRequest) -> Result<Assignments, String>;

struct Registry {
    processors: &'static [ProcessorSpec],
    assignments: Option<AssignmentFn>,
}

// Each cdylib links its own copy of this crate, so this registry is per library.
static REGISTRY: OnceLock<Registry> = OnceLock::new();

fn registry() -> &'static Registry {
    REGISTRY.get().expect("compute module used before export_compute_module! registered it")
}

extern "C" fn api_version() -> RStr<'static> {
    RStr::from_str(crate::PLUGIN_API_VERSION)
}

extern "C" fn processors() -> RVec<ProcessorInfo> {
    guarded("processors", || {
        Ok(registry()
            .processors
            .iter()
            .map(|p| ProcessorInfo {
                class_name: p.class_name.into(),
                description: p.description.into(),
                needs: p.needs.iter().map(|n| n.preload_task().into()).collect(),
            })
            .collect())
    })
    .unwrap_or_default()
}

extern "C" fn new_processor(class_name: RStr<'_>, settings_json: RStr<'_>) -> RResult<ProcessorBox, RString> {
    guarded("new_processor", || {
        let registry = registry();
        let Some(spec) = registry.processors.iter().find(|p| p.class_name == class_name.as_str()) else {
            let known: Vec<_> = registry.processors.iter().map(|p| p.class_name).collect();
            return Err(format!(
                "processor `{class_name}` is not exported by this library; it exports: {}",
                known.join(", ")
            ));
        };
        let inner = (spec.new)(settings_json.as_str())
            .map_err(|e| format!("processor `{class_name}` rejected its settings: {e}"))?;
        Ok(boxed(spec.class_name, inner))
    })
    .map_err(RString::from)
    .into()
}

extern "C" fn assignments(request: &AssignmentRequest) -> RResult<Assignments, RString> {
    guarded("assignments", || match registry().assignments {
        Some(rule) => rule(request),
        None => Err("this compute library does not implement slot assignments".to_owned()),
    })
    .map_err(RString::from)
    .into()
}

/// Builds the root module; called by [`export_compute_module!`].
#[doc(hidden)]
pub fn __build_module(processors: &'static [ProcessorSpec], assignments_fn: Option<AssignmentFn>) -> ComputeModuleRef {
    let _ = REGISTRY.set(Registry { processors, assignments: assignments_fn });
    type Rule = extern "C" fn(&AssignmentRequest) -> RResult<Assignments, RString>;
    let assignments = assignments_fn.map(|_| assignments as Rule);
    ComputeModule { api_version, processors: self::processors, new_processor, assignments }.leak_into_prefix()
}

/// Exports a compute library's root module.
///
/// ```ignore
/// lite_node_plugin_api::export_compute_module! {
///     processors: [BLOCK_DETAILS],
///     assignments: my_market::assignments, // optional
/// }
/// ```
///
/// The crate must be `crate-type = ["cdylib", "rlib"]` and depend on
/// `abi_stable` directly (its export attribute names `::abi_stable`).
#[macro_export]
macro_rules! export_compute_module {
    (processors: [$($spec:expr),* $(,)?] $(,)?) => {
        $crate::export_compute_module!(@emit [$($spec),*], ::core::option::Option::None);
    };
    (processors: [$($spec:expr),* $(,)?], assignments: $rule:path $(,)?) => {
        $crate::export_compute_module!(@emit [$($spec),*], ::core::option::Option::Some($rule as $crate::__AssignmentFn));
    };
    (@emit [$($spec:expr),*], $rule:expr) => {
        #[::abi_stable::export_root_module]
        pub fn __lite_node_compute_root_module() -> $crate::ComputeModuleRef {
            static PROCESSORS: &[$crate::ProcessorSpec] = &[$($spec),*];
            $crate::__build_module(PROCESSORS, $rule)
        }
    };
}
