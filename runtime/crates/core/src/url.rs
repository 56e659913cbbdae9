//! Endpoint URLs as every room shows and accepts them: credentials and
//! provider keys never reach a log line, and an RPC endpoint is refused with
//! a reason that names it (redacted) rather than failing on first use.

pub use url::Url;

/// The URL with any `user:password@` part replaced, for logs and errors.
pub fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let authority_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            return format!("{scheme}://***@{}", &rest[at + 1..]);
        }
    }
    url.to_owned()
}

/// An RPC endpoint's URL: http or https, with a host (WebSocket endpoints
/// are refused by name until the node can use them). The error
/// shows the URL without its path and query (providers put keys there).
pub fn parse_rpc_url(text: &str) -> Result<Url, String> {
    parse_url_of(text, false)
}

/// An anchor chain endpoint: http(s), or a WebSocket (`ws://`, `wss://`),
/// which also tells the node of each new block as it arrives.
pub fn parse_anchor_url(text: &str) -> Result<Url, String> {
    parse_url_of(text, true)
}

fn parse_url_of(text: &str, websocket: bool) -> Result<Url, String> {
    let shown = || redact_rpc_url(text);
    let url = Url::parse(text.trim()).map_err(|e| format!("`{}` is not a URL ({e})", shown()))?;
    if matches!(url.scheme(), "ws" | "wss") && !websocket {
        return Err(format!(
            "`{}`, a WebSocket endpoint: only the anchor chain's (POWERLOOM_RPC_URL) may be one; give the \
             provider's http(s) URL",
            shown()
        ));
    }
    let schemes: &[&str] = if websocket { &["http", "https", "ws", "wss"] } else { &["http", "https"] };
    if !schemes.contains(&url.scheme()) || url.host_str().is_none() {
        let what = if websocket { "an http(s) or ws(s) URL" } else { "an http(s) URL" };
        return Err(format!("`{}` is not {what}", shown()));
    }
    Ok(url)
}

/// An RPC endpoint for messages: scheme, host and port only. Providers put
/// API keys in the path (`/v3/<key>`) or the query, so neither is shown.
pub fn redact_rpc_url(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => {
            let host = u.host_str().unwrap_or("?");
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            let more = if u.path().len() > 1 || u.query().is_some() { "/…" } else { "" };
            format!("{}://{host}{port}{more}", u.scheme())
        }
        Err(_) => "<unparsable URL>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_urls_are_shown_without_path_query_or_credentials() {
        assert_eq!(redact_rpc_url("https://mainnet.infura.io/v3/0123abcd"), "https://mainnet.infura.io/…");
        assert_eq!(redact_rpc_url("https://u:p@rpc.example:8545/?key=s3cret"), "https://rpc.example:8545/…");
        assert_eq!(redact_rpc_url("http://127.0.0.1:8545"), "http://127.0.0.1:8545");
        assert_eq!(redact_rpc_url("not a url s3cret"), "<unparsable URL>");
    }

    #[test]
    fn credentials_in_urls_are_redacted() {
        assert_eq!(redact_url("https://user:tok@host/x.git"), "https://***@host/x.git");
        assert_eq!(redact_url("file:///a@b/repo"), "file:///a@b/repo");
    }
}
