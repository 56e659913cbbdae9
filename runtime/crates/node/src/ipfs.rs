//! Optional snapshot upload to IPFS through kubo's HTTP API (`IPFS_URL`).
//! The node computes every CID itself (docs/protocol.md §4); the upload asks kubo
//! for the same encoding (CIDv1, raw leaves, sha2-256) and checks that kubo
//! stored the bytes under exactly that CID.

use std::time::Duration;

use crate::config::{IpfsConfig, redact_url};

/// A kubo HTTP API endpoint.
#[derive(Clone, Debug)]
pub struct Ipfs {
    client: reqwest::Client,
    cfg: IpfsConfig,
}

impl Ipfs {
    pub fn new(cfg: &IpfsConfig) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("IPFS client: {e}"))?;
        Ok(Self { client, cfg: cfg.clone() })
    }

    /// Adds `bytes` (pinned) and returns the CID kubo stored them under.
    pub async fn add(&self, bytes: Vec<u8>, name: &str) -> Result<String, String> {
        let url = format!(
            "{}/api/v0/add?cid-version=1&raw-leaves=true&hash=sha2-256&pin=true&quieter=true",
            self.cfg.url.trim_end_matches('/')
        );
        let where_ = redact_url(&self.cfg.url);
        let part = reqwest::multipart::Part::bytes(bytes).file_name(name.to_owned());
        let mut request = self.client.post(&url).multipart(reqwest::multipart::Form::new().part("file", part));
        if let Some(key) = &self.cfg.api_key {
            request = request.basic_auth(key, self.cfg.api_secret());
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("IPFS {where_} unreachable: {}", error_chain(&e.without_url())))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| format!("IPFS {where_}: reading the answer: {e}"))?;
        if !status.is_success() {
            let excerpt: String = text.chars().take(200).collect();
            return Err(format!("IPFS {where_} answered HTTP {status}: {excerpt}"));
        }
        // kubo streams one JSON object per added file; ours is the last.
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
        let answer: serde_json::Value = serde_json::from_str(last)
            .map_err(|e| format!("IPFS {where_} answered something that is not JSON ({e})"))?;
        answer["Hash"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("IPFS {where_} answered without a Hash: {answer}"))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
