//! The small status server a process without the node's status API serves
//! (the collector, the releaser): `/health` answers the process's health as
//! JSON, 200 while healthy and 503 (the body says why) when not, and
//! `/metrics` its gauges in Prometheus' text format.

use std::{fmt::Write as _, sync::Arc};

use axum::{extract::State, http::StatusCode, response::IntoResponse, routing::get};

/// What a process's status server reports.
pub trait Status: Send + Sync + 'static {
    /// Whether the process is healthy, and the JSON `/health` answers.
    fn health(&self) -> (bool, serde_json::Value);

    /// The `/metrics` text (`None`: no `/metrics`, a 404).
    fn metrics(&self) -> Option<String> {
        None
    }
}

/// Serves `status` on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, status: Arc<dyn Status>) -> anyhow::Result<()> {
    type Shared = Arc<dyn Status>;
    async fn health(State(status): State<Shared>) -> impl IntoResponse {
        let (healthy, body) = status.health();
        (if healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, axum::Json(body))
    }
    async fn metrics(State(status): State<Shared>) -> axum::response::Response {
        match status.metrics() {
            Some(text) => ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        }
    }
    let app = axum::Router::new().route("/health", get(health)).route("/metrics", get(metrics)).with_state(status);
    Ok(axum::serve(listener, app).await?)
}

/// Prometheus gauges in the text format, one family at a time.
#[derive(Debug, Default)]
pub struct Gauges(String);

impl Gauges {
    /// A gauge `name` with its help line; `None` leaves it out.
    pub fn gauge(&mut self, name: &str, help: &str, value: Option<u64>) -> &mut Self {
        if let Some(v) = value {
            let _ = write!(self.0, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}\n");
        }
        self
    }

    /// A gauge family `name` with one sample per `(label value, value)`,
    /// under the label `label`.
    pub fn labelled(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        samples: impl IntoIterator<Item = (String, u64)>,
    ) -> &mut Self {
        let _ = write!(self.0, "# HELP {name} {help}\n# TYPE {name} gauge\n");
        for (value, v) in samples {
            let value = value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            let _ = writeln!(self.0, "{name}{{{label}=\"{value}\"}} {v}");
        }
        self
    }

    pub fn text(self) -> String {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_leave_out_what_is_unknown_and_escape_label_values() {
        let mut g = Gauges::default();
        g.gauge("a", "A.", Some(3)).gauge("b", "B.", None).labelled("c", "C.", "url", [("x\"y".to_owned(), 1)]);
        assert_eq!(g.text(), "# HELP a A.\n# TYPE a gauge\na 3\n# HELP c C.\n# TYPE c gauge\nc{url=\"x\\\"y\"} 1\n");
    }
}
