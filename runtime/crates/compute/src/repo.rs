//! Pinned git checkouts (git2): exactly the commit the operator named, or a
//! clear one-line refusal naming the repository, branch and commit.
//!
//! The compute package and, optionally, projects.json come from here. Shallow
//! fetches are tried first; transports that refuse them (the local one, or a
//! server that does not serve arbitrary commits) fall back to a full fetch.

use std::path::Path;

use git2::{FetchOptions, Oid, RemoteCallbacks, Repository, build::CheckoutBuilder};

use lite_node_config::GitPin;

use crate::progress::Progress;

/// Why a pinned checkout could not be made. Each reads as one line.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("cannot reach {repo}: {reason}{}", network_note(.transient))]
    Unreachable { repo: String, reason: String, transient: bool },
    #[error("branch {branch} not found on {repo} (wanted commit {commit})")]
    BranchMissing { repo: String, branch: String, commit: String },
    #[error("commit {commit} not found on {repo} (branch {branch})")]
    CommitMissing { repo: String, branch: String, commit: String },
    #[error("cannot check out {pin}: {reason}")]
    Checkout { pin: String, reason: String },
}

impl RepoError {
    /// Whether trying again later may succeed with the same settings: the
    /// host did not answer (refused, unresolved, timed out) or answered with
    /// a server error. A path that is not a repository, a missing branch or
    /// commit, or a refusal of access is a setting to fix.
    pub fn is_transient(&self) -> bool {
        matches!(self, RepoError::Unreachable { transient: true, .. })
    }
}

fn network_note(transient: &bool) -> &'static str {
    if *transient { " (a network failure, not a setting: try again later)" } else { "" }
}

/// Lets libgit2 read a local source repository another user owns (a
/// checkout mounted into the node's container, owned by the host's user):
/// its ownership check ("repository path … is not owned by current user")
/// guards git's command line against a stranger's repository configuration
/// that runs programs (`core.fsmonitor`, hooks). libgit2 runs neither, and
/// the node only reads the source: the pinned commit it fetches is what it
/// verifies. The repositories the node writes are its own.
fn read_any_owners_repository() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: libgit2's global options are set once, before any
        // repository is opened by this process's fetches.
        if let Err(e) = unsafe { git2::opts::set_verify_owner_validation(false) } {
            tracing::warn!("cannot turn off libgit2's repository ownership check: {e}");
        }
    });
}

/// Whether a libgit2 error is the network's, not the settings'.
fn network_failure(e: &git2::Error) -> bool {
    match e.class() {
        // Name resolution and the transports' own network errors.
        git2::ErrorClass::Net => true,
        // libgit2 files a refused or timed-out connect as an OS error.
        git2::ErrorClass::Os => e.message().starts_with("failed to connect to"),
        git2::ErrorClass::Http => e.message().contains("status code: 5"),
        _ => false,
    }
}

/// Fetches `pin` into a new repository at `dest` (which must not exist or be
/// empty), checks the commit out detached, verifies HEAD, and returns the
/// commit id. Without a pinned commit, the branch tip is used and returned.
pub fn checkout(pin: &GitPin, dest: &Path, what: &str) -> Result<String, RepoError> {
    read_any_owners_repository();
    let repo_name = lite_node_config::redact_url(&pin.url);
    let wanted = pin.commit.clone().unwrap_or_else(|| "unpinned".to_owned());
    let tip = branch_tip(pin, &repo_name, &wanted)?;
    let commit = match &pin.commit {
        Some(c) => c.clone(),
        None => {
            tracing::warn!(
                "{what}: following the tip of {} ({tip}) because SNAPSHOTTER_COMPUTE_ALLOW_UNPINNED=true; \
                 pin it with SNAPSHOTTER_COMPUTE_REPO_COMMIT={tip}",
                pin.branch
            );
            tip
        }
    };
    let oid = Oid::from_str(&commit).map_err(|e| RepoError::Checkout { pin: pin.describe(), reason: e.to_string() })?;
    let checkout_err = |reason: String| RepoError::Checkout { pin: pin.describe(), reason };

    // Depth 1 by commit, then the commit in full, then the whole branch.
    let attempts: [(&str, i32); 3] = [(commit.as_str(), 1), (commit.as_str(), 0), ("branch", 0)];
    let mut last_error = String::new();
    let mut progress = Progress::start(format!("fetching {what}"));
    for (i, (target, depth)) in attempts.into_iter().enumerate() {
        if dest.exists() {
            std::fs::remove_dir_all(dest).map_err(|e| checkout_err(format!("cannot clear {}: {e}", dest.display())))?;
        }
        let repo = Repository::init(dest).map_err(|e| checkout_err(e.message().to_owned()))?;
        let refspec = if target == "branch" {
            format!("+refs/heads/{0}:refs/remotes/origin/{0}", pin.branch)
        } else {
            target.to_owned()
        };
        match fetch(&repo, &pin.url, &refspec, depth, &mut progress) {
            Ok(()) if repo.find_commit(oid).is_ok() => {
                progress.finish(&format!("commit {commit}"));
                if i > 0 {
                    tracing::debug!("{what}: fetched after {i} fallback(s); last refusal: {last_error}");
                }
                let c = repo.find_commit(oid).map_err(|e| checkout_err(e.message().to_owned()))?;
                repo.checkout_tree(c.as_object(), Some(CheckoutBuilder::new().force()))
                    .map_err(|e| checkout_err(e.message().to_owned()))?;
                repo.set_head_detached(oid).map_err(|e| checkout_err(e.message().to_owned()))?;
                let head =
                    repo.head().and_then(|h| h.peel_to_commit()).map_err(|e| checkout_err(e.message().to_owned()))?;
                if head.id() != oid {
                    return Err(checkout_err(format!("HEAD is {} after checkout", head.id())));
                }
                return Ok(commit.clone());
            }
            Ok(()) => last_error = format!("{refspec} fetched without the commit"),
            Err(e) => last_error = e.message().to_owned(),
        }
    }
    progress.abandon();
    let _ = std::fs::remove_dir_all(dest);
    tracing::debug!("{what}: last fetch error: {last_error}");
    Err(RepoError::CommitMissing { repo: repo_name, branch: pin.branch.clone(), commit })
}

/// Lists the remote's refs (like `git ls-remote`) and returns the branch tip;
/// distinguishes an unreachable repository from a missing branch.
fn branch_tip(pin: &GitPin, repo_name: &str, wanted: &str) -> Result<String, RepoError> {
    let unreachable = |e: git2::Error| RepoError::Unreachable {
        repo: format!("{repo_name} (branch {}, commit {wanted})", pin.branch),
        reason: e.message().to_owned(),
        transient: network_failure(&e),
    };
    let mut remote = git2::Remote::create_detached(pin.url.as_str()).map_err(unreachable)?;
    remote.connect(git2::Direction::Fetch).map_err(unreachable)?;
    let wanted_ref = format!("refs/heads/{}", pin.branch);
    let tip = remote.list().map_err(unreachable)?.iter().find(|h| h.name() == wanted_ref).map(|h| h.oid().to_string());
    let _ = remote.disconnect();
    tip.ok_or_else(|| RepoError::BranchMissing {
        repo: repo_name.to_owned(),
        branch: pin.branch.clone(),
        commit: wanted.to_owned(),
    })
}

fn fetch(repo: &Repository, url: &str, refspec: &str, depth: i32, progress: &mut Progress) -> Result<(), git2::Error> {
    let mut callbacks = RemoteCallbacks::new();
    callbacks.transfer_progress(|p| {
        progress.update(|| {
            format!(
                "{}/{} objects, {:.1} MiB",
                p.received_objects(),
                p.total_objects(),
                p.received_bytes() as f64 / (1024.0 * 1024.0)
            )
        });
        true
    });
    let mut options = FetchOptions::new();
    options.remote_callbacks(callbacks).download_tags(git2::AutotagOption::None);
    if depth > 0 {
        options.depth(depth);
    }
    let mut remote = repo.remote_anonymous(url)?;
    remote.fetch(&[refspec], Some(&mut options), None)
}
