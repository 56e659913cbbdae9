//! Where alerts go: the Telegram Bot API (`TELEGRAM_BOT_TOKEN`,
//! `TELEGRAM_CHAT_ID`, `TELEGRAM_MESSAGE_THREAD_ID`, `TELEGRAM_API_URL`) and
//! the protocol's reporting service (`TELEGRAM_REPORTING_URL` +
//! `TELEGRAM_CHAT_ID`), with `TELEGRAM_NOTIFICATION_COOLDOWN` between repeated
//! failure alerts.

use std::{fmt, time::Duration};

use lite_node_core::url::Url;

use super::{ConfigErrors, EnvSnapshot, redact_url};

/// A Telegram bot that writes to one chat.
#[derive(Clone)]
pub struct BotConfig {
    token: String,
    /// A numeric chat id or `@channelusername`.
    pub chat: String,
    pub thread_id: Option<i32>,
    /// A self-hosted Bot API server (default: Telegram's).
    pub api_url: Option<String>,
}

impl BotConfig {
    pub fn new(token: &str, chat: &str) -> Self {
        Self { token: token.to_owned(), chat: chat.to_owned(), thread_id: None, api_url: None }
    }

    pub fn token(&self) -> &str {
        &self.token
    }
}

impl fmt::Debug for BotConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BotConfig")
            .field("token", &"<redacted>")
            .field("chat", &self.chat)
            .field("thread_id", &self.thread_id)
            .field("api_url", &self.api_url.as_deref().map(redact_url))
            .finish()
    }
}

/// Every configured alert channel.
#[derive(Clone, Debug)]
pub struct AlertConfig {
    pub bot: Option<BotConfig>,
    /// The reporting service's base URL and the chat id it forwards to.
    pub reporting: Option<(String, String)>,
    /// Between two alerts of the same failure kind (default 300 s).
    pub cooldown: Duration,
}

impl Default for AlertConfig {
    fn default() -> Self {
        Self { bot: None, reporting: None, cooldown: Duration::from_secs(300) }
    }
}

fn http_url(key: &str, value: &str, problems: &mut Vec<String>) {
    match Url::parse(value) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => problems.push(format!("{key} {} is not an http(s) URL", redact_url(value))),
    }
}

impl AlertConfig {
    pub fn any(&self) -> bool {
        self.bot.is_some() || self.reporting.is_some()
    }

    pub fn from_env(env: &EnvSnapshot) -> Result<Self, ConfigErrors> {
        let mut problems = Vec::new();
        let chat = env.get("TELEGRAM_CHAT_ID");
        if let Some(c) = chat {
            let numeric = c.strip_prefix('-').unwrap_or(c);
            // A channel's public username: 5 to 32 letters, digits or underscores.
            let username = c.strip_prefix('@').unwrap_or_default();
            let ok = (!numeric.is_empty() && numeric.bytes().all(|b| b.is_ascii_digit()))
                || ((5..=32).contains(&username.len())
                    && username.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
            if !ok {
                problems.push(format!("TELEGRAM_CHAT_ID {c} is neither a numeric chat id nor an @channelusername"));
            }
        }
        let thread_id = match env.get("TELEGRAM_MESSAGE_THREAD_ID").map(str::parse::<i32>) {
            None => None,
            Some(Ok(n)) if n > 0 => Some(n),
            Some(_) => {
                problems.push("TELEGRAM_MESSAGE_THREAD_ID must be a positive whole number (the topic's id)".into());
                None
            }
        };
        let api_url = env.get("TELEGRAM_API_URL").map(|u| {
            http_url("TELEGRAM_API_URL", u, &mut problems);
            u.trim_end_matches('/').to_owned()
        });
        let bot = match (env.get("TELEGRAM_BOT_TOKEN"), chat) {
            (None, _) => None,
            (Some(_), None) => {
                problems.push(
                    "TELEGRAM_BOT_TOKEN is set but TELEGRAM_CHAT_ID is not: the bot needs a chat to write to".into(),
                );
                None
            }
            (Some(token), Some(chat)) => {
                if !token.contains(':') || token.contains(char::is_whitespace) {
                    problems.push(
                        "TELEGRAM_BOT_TOKEN does not look like a bot token (<id>:<secret>, from @BotFather)".into(),
                    );
                }
                Some(BotConfig { token: token.to_owned(), chat: chat.to_owned(), thread_id, api_url })
            }
        };
        let reporting = match (env.get("TELEGRAM_REPORTING_URL"), chat) {
            (None, _) => None,
            (Some(_), None) => {
                problems.push(
                    "TELEGRAM_REPORTING_URL is set but TELEGRAM_CHAT_ID is not: the service needs your chat id".into(),
                );
                None
            }
            (Some(url), Some(chat)) => {
                http_url("TELEGRAM_REPORTING_URL", url, &mut problems);
                Some((url.trim_end_matches('/').to_owned(), chat.to_owned()))
            }
        };
        let cooldown = match env.get("TELEGRAM_NOTIFICATION_COOLDOWN").map(str::parse::<u64>) {
            None => Duration::from_secs(300),
            Some(Ok(s)) => Duration::from_secs(s),
            Some(Err(_)) => {
                problems.push("TELEGRAM_NOTIFICATION_COOLDOWN must be a whole number of seconds".into());
                Duration::from_secs(300)
            }
        };
        if problems.is_empty() { Ok(Self { bot, reporting, cooldown }) } else { Err(ConfigErrors { problems }) }
    }
}

/// Who an alert says it comes from (`lite-node alert test`): `SLOT_ID` (or
/// the first of `SLOT_IDS`) and `SIGNER_ACCOUNT_ADDRESS`. Neither is
/// required; a value that does not parse is an error naming it.
pub fn alert_sender(env: &EnvSnapshot) -> Result<(Option<u64>, Option<String>), ConfigErrors> {
    let mut problems = Vec::new();
    let slot = match (env.get("SLOT_ID"), env.get("SLOT_IDS")) {
        (Some(one), _) => one
            .trim()
            .parse::<u64>()
            .map_err(|_| problems.push(format!("SLOT_ID={one} is not a slot id (a whole number)")))
            .ok(),
        (None, Some(many)) => super::parse_slot_ids(many)
            .map_err(|e| problems.push(format!("SLOT_IDS: {e}")))
            .ok()
            .and_then(|ids| ids.first().copied()),
        (None, None) => None,
    };
    let signer = match env.get("SIGNER_ACCOUNT_ADDRESS") {
        Some(a) => a
            .parse::<alloy::primitives::Address>()
            .map_err(|_| problems.push(format!("SIGNER_ACCOUNT_ADDRESS={a} is not an address (0x and 40 hex digits)")))
            .ok()
            .map(|a| a.to_string()),
        None => None,
    };
    if problems.is_empty() { Ok((slot, signer)) } else { Err(ConfigErrors { problems }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(id: &str) -> Result<AlertConfig, ConfigErrors> {
        AlertConfig::from_env(&EnvSnapshot::from_pairs([("TELEGRAM_BOT_TOKEN", "1:t"), ("TELEGRAM_CHAT_ID", id)]))
    }

    /// Checked at start, not when the first alert fails: a numeric id or a
    /// channel's public @username (5 to 32 letters, digits, underscores).
    #[test]
    fn telegram_chat_ids_are_checked_at_start() {
        for good in ["123", "-1001234567890", "@my_channel"] {
            assert!(chat(good).is_ok(), "{good}");
        }
        for bad in ["123 # the operator's chat", "@ab", "@has space", "@bad#name", "chat"] {
            let err = chat(bad).unwrap_err().to_string();
            assert!(err.contains("is neither a numeric chat id nor an @channelusername"), "{bad}: {err}");
        }
    }
}
