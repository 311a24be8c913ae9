//! [`Prometheus`]: a Prometheus server that scrapes a test's targets.

use super::*;

/// A Prometheus server (Debian's `prometheus`) that scrapes the given targets every second,
/// with its time series in a temporary directory.
pub struct Prometheus {
    port: u16,
    daemon: Daemon,
    _dir: TempDir,
}

impl Prometheus {
    /// Starts a server that scrapes `targets` (`host:port`, path `/metrics`) every second, and
    /// waits until it says it is ready.
    pub fn start(targets: &[String]) -> Result<Self> {
        let dir = temp_dir("prometheus");
        let port = free_port();
        let list = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        std::fs::write(
            dir.path().join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: brisk\n    static_configs:\n      - targets: [{list}]\n"
            ),
        )?;
        let args: Vec<OsString> = vec![
            format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            )
            .into(),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()).into(),
            format!("--web.listen-address=127.0.0.1:{port}").into(),
            "--log.level=warn".into(),
        ];
        let daemon = Daemon::new("prometheus".into(), args, None, dir.path());
        let mut p = Prometheus {
            port,
            daemon,
            _dir: dir,
        };
        p.daemon.start("prometheus", || {
            http_get(port, "/-/ready").is_some_and(|(status, _)| status == 200)
        })?;
        Ok(p)
    }

    /// The value of the instant query `expr` now (`None` while it has no result, or the
    /// query fails): one number, so `expr` should aggregate, e.g. `sum(metric)`.
    pub fn query(&self, expr: &str) -> Option<f64> {
        let path = format!("/api/v1/query?query={}", percent_encode(expr));
        let (status, body) = http_get(self.port, &path)?;
        if status != 200 {
            return None;
        }
        let json: serde_json::Value = serde_json::from_slice(&body).ok()?;
        json["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// The health of each scrape target, as Prometheus's `/api/v1/targets` reports it:
    /// `(url, health, last error)`.
    pub fn targets(&self) -> Vec<(String, String, String)> {
        let Some((_, body)) = http_get(self.port, "/api/v1/targets") else {
            return Vec::new();
        };
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        json["data"]["activeTargets"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|t| {
                        let s = |k: &str| t[k].as_str().unwrap_or_default().to_string();
                        (s("scrapeUrl"), s("health"), s("lastError"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.daemon.log).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.daemon.kill();
        self.daemon.report_if_panicking("prometheus");
    }
}
