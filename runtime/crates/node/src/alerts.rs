//! Alerts to the operator: the Telegram Bot API (teloxide) and the protocol's
//! reporting service (`/reportSnapshotIssue`, `/reportEpochProcessingIssue`
//! with the reference node's message shapes).
//!
//! Epoch processing never waits for an alert: [`Alerter::notify`] puts it on
//! a bounded queue (a full queue drops the newest and says so) and a
//! background task delivers it, retrying while the API is down and waiting as
//! long as a 429 asks. Failure alerts of the same kind obey the cooldown.
//!
//! Each channel has its own queue and delivery task (under the node's
//! supervisor), so one channel down holds up no other. A latched alert
//! (three failures, a recovery) is kept in `state/pending-alerts.json` until
//! every channel has taken it, and sent again after a restart. The bot token
//! lives only in the configuration's `BotConfig` and in teloxide; delivery
//! errors are scrubbed of it. A new channel is a `Channel` variant here (its
//! name, how it sends and classifies failures, its place in `channels`) and
//! its settings in the configuration's `AlertConfig`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::json;
use teloxide::{
    RequestError,
    payloads::SendMessageSetters,
    requests::Requester,
    types::{ChatId, MessageId, Recipient, ThreadId},
};
use tokio::{sync::mpsc, time::Instant};

use backon::Retryable;

use crate::{
    books::{Books, StreakEntry},
    config::{AlertConfig, BotConfig, redact_url},
    retry::Policy,
    supervisor::Supervisor,
};

/// Alerts waiting for delivery, per channel, before new ones are dropped.
const QUEUE: usize = 64;
/// Telegram's message limit is 4096 characters.
const MAX_TEXT: usize = 4000;

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AlertKind {
    /// Three (or more) consecutive selected epochs failed; once per streak.
    ThreeFailures { streak: Vec<StreakEntry> },
    /// A selected epoch succeeded after an alerted streak.
    Recovered { epoch_id: u64, failures: u64 },
    /// A selected project failed (cooldown applies).
    MissedSnapshot { epoch_id: u64, project: String, error: String },
    /// The safety net found no epoch processed for a while (cooldown applies).
    Unhealthy { idle: Duration, checks: u32, exit_after: u32 },
    /// A project's compute hung past its timeout, so it is not called for
    /// a while (once per quarantine: the back-off spaces them).
    Quarantined { project: String, hangs: u32, epoch_id: u64, until_epoch: u64 },
    /// `lite-node alert test`.
    Test,
}

impl AlertKind {
    /// The protocol's issue type.
    pub fn issue_type(&self) -> &'static str {
        match self {
            Self::ThreeFailures { .. } | Self::MissedSnapshot { .. } | Self::Quarantined { .. } => "MISSED_SNAPSHOT",
            Self::Recovered { .. } => "SNAPSHOTTER_RECOVERED",
            Self::Unhealthy { .. } => "UNHEALTHY_EPOCH_PROCESSING",
            Self::Test => "LITE_NODE_TEST_MESSAGE",
        }
    }

    /// A name for log lines.
    fn label(&self) -> &'static str {
        match self {
            Self::ThreeFailures { .. } => "three-failure",
            Self::Recovered { .. } => "recovery",
            Self::MissedSnapshot { .. } => "missed-snapshot",
            Self::Unhealthy { .. } => "unhealthy",
            Self::Quarantined { .. } => "quarantine",
            Self::Test => "test",
        }
    }

    /// The alerts the books latch: each is sent once, so it is kept on disk
    /// until every channel has taken it.
    fn latched(&self) -> bool {
        matches!(self, Self::ThreeFailures { .. } | Self::Recovered { .. })
    }

    fn cooled_down(&self) -> Option<&'static str> {
        match self {
            Self::MissedSnapshot { .. } => Some("missed-snapshot"),
            Self::Unhealthy { .. } => Some("unhealthy"),
            _ => None,
        }
    }
}

impl From<crate::books::Notice> for AlertKind {
    fn from(n: crate::books::Notice) -> Self {
        use crate::books::Notice;
        match n {
            Notice::MissedSnapshot { epoch_id, project, error } => Self::MissedSnapshot { epoch_id, project, error },
            Notice::ThreeFailures { streak } => Self::ThreeFailures { streak },
            Notice::Recovered { epoch_id, failures } => Self::Recovered { epoch_id, failures },
        }
    }
}

/// Who is alerting.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sender {
    pub slot_id: u64,
    pub signer: String,
}

/// One alert, with the books as they stood.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Alert {
    pub kind: AlertKind,
    pub from: Sender,
    /// The books of the (first) slot it is about.
    pub books: Books,
    pub at_unix: u64,
    /// Every slot one event touched, when more than the sender's own: an
    /// operator with many slots gets one message naming them, not one each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<u64>,
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
}

impl Alert {
    /// The Telegram message.
    pub fn text(&self) -> String {
        let several = self.slots.len() > 1;
        let slot = if several {
            format!("slots {} ({} slots)", crate::config::format_slot_ids(&self.slots), self.slots.len())
        } else {
            format!("slot {}", self.from.slot_id)
        };
        let text = match &self.kind {
            AlertKind::ThreeFailures { streak } => {
                let mut t = format!(
                    "⚠️ lite-node {slot} ({}): {} consecutive selected epochs failed{}\n",
                    self.from.signer,
                    self.books.overall.consecutive_failures.max(streak.len() as u64),
                    if several { " on each" } else { "" }
                );
                if several {
                    t.push_str(&format!("Slot {}'s streak:\n", self.slots[0]));
                }
                for s in streak {
                    t.push_str(&format!("• epoch {}: {}\n", s.epoch_id, clip(&s.errors.join("; "), 400)));
                }
                t.push_str("No further alert until a selected epoch succeeds.");
                t
            }
            AlertKind::Recovered { epoch_id, failures } => {
                format!("✅ lite-node {slot}: epoch {epoch_id} succeeded after {failures} failed selected epoch(s).")
            }
            AlertKind::MissedSnapshot { epoch_id, project, error } => {
                format!("lite-node {slot}: MISSED_SNAPSHOT in epoch {epoch_id}, {project}: {}", clip(error, 600))
            }
            AlertKind::Unhealthy { idle, checks, exit_after } => format!(
                "🔴 lite-node {slot}: UNHEALTHY_EPOCH_PROCESSING, no epoch processed for {} min \
                 (stuck check {checks} of {exit_after}; the node exits for a restart after {exit_after}).",
                idle.as_secs() / 60
            ),
            AlertKind::Quarantined { project, hangs, epoch_id, until_epoch } => format!(
                "🟠 lite-node {slot}: project {project} is quarantined: its compute hung past the timeout in \
                 {hangs} epoch(s) in a row (last in epoch {epoch_id}); it is not called again before epoch \
                 {until_epoch}. Every other project goes on."
            ),
            AlertKind::Test => {
                format!("lite-node {slot} ({}): test message from `lite-node alert test`.", self.from.signer)
            }
        };
        clip(&text, MAX_TEXT)
    }

    fn extra(&self) -> String {
        match &self.kind {
            AlertKind::MissedSnapshot { error, .. } => clip(error, 1000),
            _ => self.text(),
        }
    }

    /// The reporting service's endpoint and body, when it takes this kind.
    fn report(&self, chat_id: &str) -> Option<(&'static str, serde_json::Value)> {
        let (project, epoch) = match &self.kind {
            AlertKind::MissedSnapshot { epoch_id, project, .. } | AlertKind::Quarantined { epoch_id, project, .. } => {
                (project.clone(), epoch_id.to_string())
            }
            AlertKind::ThreeFailures { streak } => {
                (String::new(), streak.last().map(|s| s.epoch_id.to_string()).unwrap_or_default())
            }
            AlertKind::Unhealthy { .. } | AlertKind::Test => (String::new(), String::new()),
            AlertKind::Recovered { .. } => return None,
        };
        let issue = json!({
            "instanceID": self.from.signer,
            "issueType": self.kind.issue_type(),
            "projectID": project,
            "epochId": epoch,
            "timeOfReporting": self.at_unix.to_string(),
            "extra": self.extra(),
        });
        if matches!(self.kind, AlertKind::Unhealthy { .. }) {
            let body = json!({"chatId": chat_id, "slotId": self.from.slot_id, "issue": issue});
            return Some(("/reportEpochProcessingIssue", body));
        }
        let b = &self.books;
        let projects: Vec<_> = b
            .projects
            .iter()
            .map(|(p, c)| {
                json!({
                    "projectId": p,
                    "successfulSubmissions": c.selected_success,
                    "incorrectSubmissions": 0,
                    "missedSubmissions": c.selected_failure,
                })
            })
            .collect();
        let status = json!({
            "totalSuccessfulSubmissions": b.overall.selected_success,
            "totalIncorrectSubmissions": 0,
            "totalMissedSubmissions": b.overall.selected_failure,
            "consecutiveMissedSubmissions": b.overall.consecutive_failures,
            "projects": projects,
        });
        Some((
            "/reportSnapshotIssue",
            json!({"chatId": chat_id, "slotId": self.from.slot_id, "issue": issue, "status": status}),
        ))
    }
}

/// Why a delivery did not happen.
#[derive(Debug)]
enum Failure {
    /// Try again after this long (a 429's retry_after).
    After(Duration, String),
    /// Down or unreachable: back off and try again, for as long as it takes.
    Transient(String),
    /// An error the API does not classify: retried a few times, then dropped.
    Unclear(String),
    /// Retrying cannot help (bad token, unknown chat, …).
    Permanent(String),
}

/// One delivery channel.
enum Channel {
    Bot { bot: teloxide::Bot, chat: Recipient, thread: Option<ThreadId>, token: String, api: String },
    Reporting { client: reqwest::Client, url: String, chat_id: String },
}

impl Channel {
    fn name(&self) -> String {
        match self {
            Self::Bot { api, .. } => format!("telegram bot ({api})"),
            Self::Reporting { url, .. } => format!("reporting service ({})", redact_url(url)),
        }
    }

    async fn send(&self, alert: &Alert) -> Result<String, Failure> {
        match self {
            Self::Bot { bot, chat, thread, token, .. } => {
                let mut request = bot.send_message(chat.clone(), alert.text());
                if let Some(t) = thread {
                    request = request.message_thread_id(*t);
                }
                let hide = |e: &dyn std::fmt::Display| e.to_string().replace(token.as_str(), "<token>");
                match request.await {
                    Ok(m) => Ok(format!("message {} sent to chat {}", m.id, m.chat.id)),
                    Err(RequestError::RetryAfter(s)) => Err(Failure::After(
                        Duration::from_secs(u64::from(s.seconds())),
                        format!("rate limited: retry after {}s", s.seconds()),
                    )),
                    Err(e @ RequestError::Api(teloxide::ApiError::Unknown(_))) => Err(Failure::Unclear(hide(&e))),
                    Err(e @ RequestError::Api(_)) => Err(Failure::Permanent(hide(&e))),
                    Err(e) => Err(Failure::Transient(hide(&e))),
                }
            }
            Self::Reporting { client, url, chat_id } => {
                let Some((endpoint, body)) = alert.report(chat_id) else { return Ok("not a reported kind".into()) };
                let response = client
                    .post(format!("{url}{endpoint}"))
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
                    .map_err(|e| Failure::Transient(e.without_url().to_string()))?;
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                match status.as_u16() {
                    200..=299 => Ok(format!("{endpoint} answered {status}")),
                    429 => Err(Failure::After(Duration::from_secs(5), format!("{endpoint} answered 429"))),
                    400..=499 => Err(Failure::Permanent(format!("{endpoint} answered {status}: {}", clip(&text, 200)))),
                    _ => Err(Failure::Transient(format!("{endpoint} answered {status}: {}", clip(&text, 200)))),
                }
            }
        }
    }
}

fn bot_channel(cfg: &BotConfig) -> Result<Channel, String> {
    lite_node_core::tls::install_crypto_provider();
    // teloxide's own HTTP client (its reqwest), with timeouts that suit alerts.
    let client = teloxide::net::default_reqwest_settings()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("telegram client: {e}"))?;
    let mut bot = teloxide::Bot::with_client(cfg.token(), client);
    let api = cfg.api_url.clone().unwrap_or_else(|| "https://api.telegram.org".into());
    if let Some(url) = &cfg.api_url {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("TELEGRAM_API_URL: {e}"))?;
        bot = bot.set_api_url(parsed);
    }
    let chat = match cfg.chat.parse::<i64>() {
        Ok(id) => Recipient::Id(ChatId(id)),
        Err(_) => Recipient::ChannelUsername(cfg.chat.clone()),
    };
    let thread = cfg.thread_id.map(|t| ThreadId(MessageId(t)));
    Ok(Channel::Bot { bot, chat, thread, token: cfg.token().to_owned(), api: redact_url(&api) })
}

fn channels(cfg: &AlertConfig) -> Result<Vec<Channel>, String> {
    let mut out = Vec::new();
    if let Some(bot) = &cfg.bot {
        out.push(bot_channel(bot)?);
    }
    if let Some((url, chat_id)) = &cfg.reporting {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("reporting client: {e}"))?;
        out.push(Channel::Reporting { client, url: url.clone(), chat_id: chat_id.clone() });
    }
    Ok(out)
}

fn unix_now() -> u64 {
    lite_node_core::time::now_secs()
}

/// The node's alert queues: one per channel, each with its own delivery
/// task, so a channel that is down never holds up another.
pub struct Alerter {
    queues: Vec<(String, mpsc::Sender<Queued>)>,
    pending: Arc<Pending>,
    from: Sender,
    cooldown: Duration,
    last: Mutex<HashMap<&'static str, Instant>>,
    /// Each worked slot's signer, once the slots are known (start-up checks
    /// them after the alerter starts).
    signers: std::sync::OnceLock<HashMap<u64, String>>,
}

impl std::fmt::Debug for Alerter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let channels: Vec<&str> = self.queues.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Alerter").field("channels", &channels).field("from", &self.from).finish_non_exhaustive()
    }
}

impl Alerter {
    /// Starts the delivery tasks on the current runtime (none when no
    /// channel is configured). With `pending_path`, latched alerts not yet
    /// taken by every channel are kept there and sent again after a restart.
    pub fn start(
        cfg: &AlertConfig,
        from: Sender,
        pending_path: Option<std::path::PathBuf>,
        tasks: &mut Supervisor,
    ) -> Result<Arc<Self>, String> {
        let pending = Arc::new(Pending::open(pending_path));
        let queues: Vec<(String, mpsc::Sender<Queued>)> = channels(cfg)?
            .into_iter()
            .map(|channel| {
                let (tx, rx) = mpsc::channel(QUEUE);
                let name = channel.name();
                let (channel, rx, pending) =
                    (Arc::new(channel), Arc::new(tokio::sync::Mutex::new(rx)), pending.clone());
                // A delivery task that panics is started again on the same queue.
                tasks.spawn_restarting("alert delivery", move || {
                    deliver_all(channel.clone(), rx.clone(), pending.clone())
                });
                (name, tx)
            })
            .collect();
        for entry in pending.entries().into_iter().filter(|e| !e.remaining.is_empty()) {
            pending.queued(entry.id);
            for (name, tx) in queues.iter().filter(|(n, _)| entry.remaining.contains(n)) {
                tracing::info!("{name}: sending again the {} alert from before the restart", entry.alert.kind.label());
                let _ = tx.try_send(Queued { id: Some(entry.id), alert: entry.alert.clone() });
            }
        }
        Ok(Arc::new(Self {
            queues,
            pending,
            from,
            cooldown: cfg.cooldown,
            last: Mutex::default(),
            signers: Default::default(),
        }))
    }

    /// Queues an alert on every channel; never waits. Repeated failure
    /// alerts within the cooldown are skipped. Returns how many channel
    /// queues took it.
    pub fn notify(&self, kind: AlertKind, books: &Books) -> usize {
        self.notify_slots(kind, books, Vec::new())
    }

    /// The slots this node works and their signers: alerts name the slot an
    /// event touched and its own signer (with per-slot signers, or when the
    /// first configured slot was skipped).
    pub fn set_signers(&self, signers: HashMap<u64, String>) {
        let _ = self.signers.set(signers);
    }

    /// Who an alert about `slots` comes from: the first slot, with its signer.
    fn sender_of(&self, slots: &[u64]) -> Sender {
        match slots.first() {
            Some(&slot_id) => Sender {
                slot_id,
                signer: self.signers.get().and_then(|s| s.get(&slot_id)).unwrap_or(&self.from.signer).clone(),
            },
            None => self.from.clone(),
        }
    }

    /// [`Alerter::notify`] for one event that touched several `slots` (the
    /// first is the one `books` and `kind` describe).
    pub fn notify_slots(&self, kind: AlertKind, books: &Books, slots: Vec<u64>) -> usize {
        match self.prepare(kind, books, slots) {
            Ok(Some(prepared)) => self.dispatch(prepared),
            Ok(None) => 0,
            Err(failed) => {
                let (e, prepared) = *failed;
                // Not kept on disk: it goes out now, but not again after a restart.
                tracing::warn!("saving pending alerts: {e}");
                self.dispatch(prepared)
            }
        }
    }

    /// An alert made ready and, when it is latched,
    /// kept in the pending file before anything else happens: the books
    /// that asked for it are saved only after this returns, so a crash in
    /// between loses neither (the restart sends it; an epoch worked again
    /// asks for the same alert, which is not kept twice). `None`: nothing to
    /// send (no channel, or the same alert already on its way; the cooldown
    /// is [`Alerter::dispatch`]'s). A pending file that cannot be written is an error, with the
    /// alert: the caller decides whether it goes out unkept.
    pub fn prepare(
        &self,
        kind: AlertKind,
        books: &Books,
        slots: Vec<u64>,
    ) -> Result<Option<Prepared>, Box<(std::io::Error, Prepared)>> {
        if self.queues.is_empty() {
            return Ok(None);
        }
        let from = self.sender_of(&slots);
        let slots = if slots.len() > 1 { slots } else { Vec::new() };
        let alert = Alert { kind, from, books: books.clone(), at_unix: unix_now(), slots };
        if !alert.kind.latched() {
            return Ok(Some(Prepared(Queued { id: None, alert })));
        }
        match self.pending.add(&alert, self.queues.iter().map(|(n, _)| n.clone()).collect()) {
            Ok(Some(id)) => Ok(Some(Prepared(Queued { id: Some(id), alert }))),
            Ok(None) => Ok(None),
            Err(e) => Err(Box::new((e, Prepared(Queued { id: None, alert })))),
        }
    }

    /// Puts a prepared alert on every channel's queue; never waits. Returns
    /// how many queues took it.
    /// Repeated failure alerts within the cooldown are skipped here, not
    /// when prepared: an epoch whose books failed to save and is worked
    /// again still sends its alert.
    pub fn dispatch(&self, prepared: Prepared) -> usize {
        let Prepared(queued) = prepared;
        // Cooled-down kinds are never latched (kept pending), so skipping
        // one leaves nothing behind.
        if let Some(key) = queued.alert.kind.cooled_down() {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.get(key).is_some_and(|at| at.elapsed() < self.cooldown) {
                tracing::debug!(
                    "{} alert skipped: within the {}s cooldown",
                    queued.alert.kind.issue_type(),
                    self.cooldown.as_secs()
                );
                return 0;
            }
            last.insert(key, Instant::now());
        }
        if let Some(id) = queued.id {
            self.pending.queued(id);
        }
        let mut taken = 0;
        for (name, tx) in &self.queues {
            match tx.try_send(Queued { id: queued.id, alert: queued.alert.clone() }) {
                Ok(()) => taken += 1,
                Err(e) => {
                    let kind = e.into_inner().alert.kind.issue_type();
                    match queued.id {
                        // Latched: sent once the queue has room, never lost.
                        Some(id) => {
                            self.pending.dropped(id, name);
                            tracing::warn!(
                                "{name}: alert queue full ({QUEUE} waiting): the {kind} alert is sent once it has room"
                            );
                        }
                        None => tracing::warn!("{name}: alert queue full ({QUEUE} waiting): dropped a {kind} alert"),
                    }
                }
            }
        }
        taken
    }
}

/// An alert ready to go out ([`Alerter::prepare`]), once what asked for it
/// is saved ([`Alerter::dispatch`]).
pub struct Prepared(Queued);

/// An alert on a channel's queue; `id` when it is kept in [`Pending`].
struct Queued {
    id: Option<u64>,
    alert: Alert,
}

/// Delivers one channel's queue until the Alerter is dropped.
async fn deliver_all(
    channel: Arc<Channel>,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Queued>>>,
    pending: Arc<Pending>,
) -> anyhow::Result<()> {
    let name = channel.name();
    let mut rx = rx.lock().await;
    while let Some(q) = rx.recv().await {
        deliver(&channel, &q.alert).await;
        if let Some(id) = q.id {
            pending.done(id, &name);
        }
        // Latched alerts a full queue turned away: their turn now.
        for (id, alert) in pending.take_dropped(&name) {
            deliver(&channel, &alert).await;
            pending.done(id, &name);
        }
    }
    Ok(())
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct PendingEntry {
    id: u64,
    alert: Alert,
    /// Channels that have not taken it yet.
    remaining: Vec<String>,
    /// Put on the channels' queues by this process (not kept: after a
    /// restart every entry is queued again once).
    #[serde(skip)]
    queued: bool,
    /// Channels whose queue was full when it was dispatched: sent by that
    /// channel's delivery task once it has room (not kept: after a restart
    /// every entry is queued again once).
    #[serde(skip)]
    dropped: Vec<String>,
}

impl PendingEntry {
    /// The same event: its slots and what the books latched it for — a
    /// streak by its epochs, a recovery by its epoch — not the errors' text,
    /// which an epoch worked again after a crash may give otherwise.
    fn same_event(&self, alert: &Alert) -> bool {
        let a = &self.alert;
        let same_kind = match (&a.kind, &alert.kind) {
            (AlertKind::ThreeFailures { streak: x }, AlertKind::ThreeFailures { streak: y }) => {
                x.iter().map(|e| e.epoch_id).eq(y.iter().map(|e| e.epoch_id))
            }
            (AlertKind::Recovered { epoch_id: x, .. }, AlertKind::Recovered { epoch_id: y, .. }) => x == y,
            (x, y) => x == y,
        };
        a.from.slot_id == alert.from.slot_id && a.slots == alert.slots && same_kind
    }
}

/// Delivered latched alerts kept in the pending file (see [`Pending::done`]).
const DELIVERED_KEPT: usize = 16;

/// Latched alerts not yet delivered everywhere, kept in a file (written
/// atomically on every change).
struct Pending {
    path: Option<std::path::PathBuf>,
    entries: Mutex<Vec<PendingEntry>>,
}

impl Pending {
    fn open(path: Option<std::path::PathBuf>) -> Self {
        let entries = path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice::<Vec<PendingEntry>>(&b).ok())
            .unwrap_or_default();
        Self { path, entries: Mutex::new(entries) }
    }

    fn entries(&self) -> Vec<PendingEntry> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Keeps `alert` until every channel took it, saved before this
    /// returns; `None` when the same event is kept already and queued (an
    /// epoch worked again after a crash between this and the books' save).
    /// A save that fails keeps nothing.
    fn add(&self, alert: &Alert, channels: Vec<String>) -> std::io::Result<Option<u64>> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(kept) = entries.iter().find(|e| e.same_event(alert)) {
            // Queued by this process, delivered already, or resent at start:
            // on its way. Kept by a commit that failed here: not yet.
            return Ok((!kept.queued && !kept.remaining.is_empty()).then_some(kept.id));
        }
        let id = entries.iter().map(|e| e.id + 1).max().unwrap_or(1);
        entries.push(PendingEntry {
            id,
            alert: alert.clone(),
            remaining: channels,
            queued: false,
            dropped: Vec::new(),
        });
        if let Err(e) = self.save_durable(&entries) {
            entries.retain(|e| e.id != id);
            return Err(e);
        }
        Ok(Some(id))
    }

    fn queued(&self, id: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for e in entries.iter_mut().filter(|e| e.id == id) {
            e.queued = true;
        }
    }

    /// `channel`'s queue was full for alert `id`: its delivery task sends it
    /// once it has delivered what it holds ([`Pending::take_dropped`]).
    fn dropped(&self, id: u64, channel: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for e in entries.iter_mut().filter(|e| e.id == id) {
            e.dropped.push(channel.to_owned());
        }
    }

    /// The latched alerts `channel`'s full queue dropped, each handed out
    /// once.
    fn take_dropped(&self, channel: &str) -> Vec<(u64, Alert)> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut taken = Vec::new();
        for e in entries.iter_mut() {
            if let Some(at) = e.dropped.iter().position(|c| c == channel) {
                e.dropped.remove(at);
                if e.remaining.iter().any(|c| c == channel) {
                    taken.push((e.id, e.alert.clone()));
                }
            }
        }
        taken
    }

    /// The file as `entries` stand, synced with its directory: it must be
    /// on disk before the books that asked for an alert are.
    fn save_durable(&self, entries: &[PendingEntry]) -> std::io::Result<()> {
        let Some(path) = &self.path else { return Ok(()) };
        let bytes = serde_json::to_vec_pretty(entries).expect("alerts serialize");
        crate::atomic_file::write_durable(path, &bytes)
    }

    /// `channel` took alert `id`. An alert every channel took stays in the
    /// file, delivered, among the last [`DELIVERED_KEPT`]: the epoch that
    /// asked for it, worked again after a crash before its books were
    /// saved, finds it there and does not send it twice.
    fn done(&self, id: u64, channel: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for e in entries.iter_mut().filter(|e| e.id == id) {
            e.remaining.retain(|c| c != channel);
        }
        let delivered = entries.iter().filter(|e| e.remaining.is_empty()).count();
        let mut surplus = delivered.saturating_sub(DELIVERED_KEPT);
        entries.retain(|e| {
            let drop = surplus > 0 && e.remaining.is_empty();
            surplus -= usize::from(drop);
            !drop
        });
        self.save(&entries);
    }

    fn save(&self, entries: &[PendingEntry]) {
        let Some(path) = &self.path else { return };
        let bytes = serde_json::to_vec_pretty(entries).expect("alerts serialize");
        if let Err(e) = crate::atomic_file::write(path, &bytes) {
            tracing::warn!("saving pending alerts: {e}");
        }
    }
}

/// Attempts at an alert the API answers with an unclassified error.
const UNCLEAR_ATTEMPTS: u32 = 8;

/// Sends one alert under [`Policy::ALERT`]: a rate limit's `retry_after` is
/// waited out, a permanent refusal (bad token, unknown chat) drops it at once,
/// an unclassified error after [`UNCLEAR_ATTEMPTS`].
async fn deliver(channel: &Channel, alert: &Alert) {
    let what = alert.kind.issue_type();
    let mut unclear = 0;
    let mut warned = false;
    let sent = (|| channel.send(alert))
        .retry(Policy::ALERT.builder())
        .sleep(tokio::time::sleep)
        .when(|f: &Failure| match f {
            Failure::Permanent(_) => false,
            Failure::Unclear(_) => {
                unclear += 1;
                unclear < UNCLEAR_ATTEMPTS
            }
            Failure::After(..) | Failure::Transient(_) => true,
        })
        .adjust(|f, wait| match f {
            Failure::After(rate_limit, _) => Some(*rate_limit),
            _ => wait,
        })
        .notify(|f: &Failure, wait| match f {
            Failure::After(_, e) => tracing::info!("{}: {e}; waiting {}s", channel.name(), wait.as_secs()),
            Failure::Transient(e) | Failure::Unclear(e) | Failure::Permanent(e) => {
                if !warned {
                    tracing::warn!("{} unavailable ({e}); retrying until it answers", channel.name());
                    warned = true;
                }
            }
        })
        .await;
    match sent {
        Ok(answer) if warned => {
            tracing::info!("{what} alert delivered through {} after retrying ({answer})", channel.name())
        }
        Ok(answer) => tracing::debug!("{what} alert: {answer}"),
        Err(Failure::Permanent(e)) => tracing::error!("{what} alert not deliverable through {}: {e}", channel.name()),
        Err(Failure::Unclear(e) | Failure::After(_, e) | Failure::Transient(e)) => {
            tracing::error!("{what} alert dropped after {unclear} attempts through {}: {e}", channel.name())
        }
    }
}

/// What each channel made of a test message: `(channel, what it answered
/// or why it failed)`.
pub type TestResults = Vec<(String, Result<String, String>)>;

/// Sends one test message through every configured channel, once each.
/// (Boxed here: see `lite_node_core::BoxFuture`.)
pub fn test(cfg: &AlertConfig, from: Sender) -> lite_node_core::LocalBoxFuture<'_, Result<TestResults, String>> {
    Box::pin(test_channels(cfg, from))
}

async fn test_channels(cfg: &AlertConfig, from: Sender) -> Result<TestResults, String> {
    let alert = Alert { kind: AlertKind::Test, from, books: Books::default(), at_unix: unix_now(), slots: Vec::new() };
    let mut results = Vec::new();
    for channel in channels(cfg)? {
        let result = channel.send(&alert).await.map_err(|f| match f {
            Failure::After(_, e) | Failure::Transient(e) | Failure::Unclear(e) | Failure::Permanent(e) => e,
        });
        results.push((channel.name(), result));
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With per-slot signers, or the first configured slot skipped, an alert
    /// names the slot it is about and that slot's own signer.
    #[test]
    fn an_alert_comes_from_its_slot_and_that_slots_signer() {
        let mut tasks = crate::supervisor::Supervisor::new();
        let default = Sender { slot_id: 1, signer: "0xdefault".into() };
        let alerter = Alerter::start(&AlertConfig::default(), default, None, &mut tasks).unwrap();
        assert_eq!(alerter.sender_of(&[]).slot_id, 1);
        assert_eq!(alerter.sender_of(&[7]).signer, "0xdefault", "signers not known yet");
        alerter.set_signers(HashMap::from([(2, "0xtwo".to_owned()), (7, "0xseven".to_owned())]));
        let from = alerter.sender_of(&[7, 2]);
        assert_eq!((from.slot_id, from.signer.as_str()), (7, "0xseven"));
        assert_eq!(alerter.sender_of(&[2]).signer, "0xtwo");
    }

    /// A latched alert is kept once per event: asked for again before it
    /// went out (a commit that failed) it is the same entry; asked for again
    /// after every channel took it (the epoch worked again after a crash
    /// before its books were saved), nothing is kept or sent again — also
    /// after a restart reads the file.
    #[test]
    fn a_latched_alert_is_kept_once_per_event_and_never_sent_twice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pending-alerts.json");
        let alert_saying = |epochs: &[u64], error: &str| Alert {
            kind: AlertKind::ThreeFailures {
                streak: epochs
                    .iter()
                    .map(|&epoch_id| crate::books::StreakEntry { epoch_id, errors: vec![error.into()] })
                    .collect(),
            },
            from: Sender { slot_id: 2, signer: "0xtwo".into() },
            books: Books::default(),
            at_unix: 0,
            slots: vec![],
        };
        let alert = |epochs: &[u64]| alert_saying(epochs, "boom");
        let pending = Pending::open(Some(path.clone()));
        let channels = vec!["telegram".to_owned()];
        let id = pending.add(&alert(&[1, 2, 3]), channels.clone()).unwrap().expect("kept");
        assert_eq!(pending.add(&alert(&[1, 2, 3]), channels.clone()).unwrap(), Some(id), "not queued yet: the same");
        pending.queued(id);
        assert_eq!(pending.add(&alert(&[1, 2, 3]), channels.clone()).unwrap(), None, "on its way");
        pending.done(id, "telegram");
        let reopened = Pending::open(Some(path));
        assert_eq!(reopened.add(&alert(&[1, 2, 3]), channels.clone()).unwrap(), None, "delivered before the restart");
        // Issue 55, item 9: the last epoch worked again after a crash fails
        // with another text (a timeout where it was an RPC error): the same
        // streak, not sent again.
        let again = alert_saying(&[1, 2, 3], "compute timed out after 60 s");
        assert_eq!(reopened.add(&again, channels.clone()).unwrap(), None, "the same streak, another error text");
        assert!(
            reopened.add(&alert(&[4, 5, 6]), channels.clone()).unwrap().is_some(),
            "another streak is another event"
        );
        // Issue 55, item 9: a latched alert a full queue turned away is
        // handed to that channel's delivery task once, and only for a
        // channel that has not taken it.
        let other = reopened.add(&alert(&[7, 8, 9]), channels).unwrap().expect("kept");
        reopened.dropped(other, "telegram");
        reopened.dropped(other, "webhook");
        let taken = reopened.take_dropped("telegram");
        assert_eq!(taken.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [other], "sent once the queue has room");
        assert!(reopened.take_dropped("telegram").is_empty(), "handed out once");
        assert!(reopened.take_dropped("webhook").is_empty(), "not one of its channels");
    }
}
