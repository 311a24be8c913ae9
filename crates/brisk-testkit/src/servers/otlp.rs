//! [`OtlpReceiver`]: the OpenTelemetry Collector's OTLP receiver, for the tracing tests.

use std::io::{BufRead, BufReader};
use std::process::ChildStdout;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use serde_json::Value;

use super::*;

/// An OTLP/HTTP receiver on 127.0.0.1: the OpenTelemetry Collector's own `otlpreceiver` (Go),
/// wrapped by `crates/brisk-testkit/otlp_receiver`, which writes every span it receives as one
/// JSON line; [`spans`](Self::spans) returns them parsed.
///
/// Each span is an object with `trace_id` (32 hex digits), `span_id` (16), `parent_span_id`
/// (16, or `""` for a root span), `name`, `kind` (`"Server"`, `"Client"`, `"Internal"`…),
/// `service` (the resource's `service.name`), `status` (`"Unset"`, `"Ok"` or `"Error"`),
/// `attributes` (name to string, number or bool), `start_unix_nano` and `end_unix_nano`.
///
/// The program is `target/otlp-receiver/otlp-receiver`, which `scripts/install-test-servers`
/// builds with `go build`.
pub struct OtlpReceiver {
    port: u16,
    daemon: Daemon,
    received: Arc<Received>,
    reader: Option<JoinHandle<()>>,
    _dir: TempDir,
}

/// What the receiver wrote to its standard output so far, and a signal for each new line.
#[derive(Default)]
struct Received {
    lines: Mutex<Lines>,
    changed: Condvar,
}

#[derive(Default)]
struct Lines {
    /// The receiver said it listens.
    listening: bool,
    /// Its standard output ended: it exited (or was killed).
    closed: bool,
    spans: Vec<Value>,
}

impl Received {
    fn lock(&self) -> MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `done` holds (at most `timeout`) and returns the lines, whether or not it
    /// does.
    fn wait(&self, timeout: Duration, done: impl Fn(&Lines) -> bool) -> MutexGuard<'_, Lines> {
        self.changed
            .wait_timeout_while(self.lock(), timeout, |lines| !done(lines))
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// Reads the receiver's standard output to its end, one JSON line at a time.
    fn read(&self, stdout: ChildStdout) {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let value = match serde_json::from_str::<Value>(&line) {
                Ok(value) => value,
                Err(e) => {
                    eprintln!("otlp-receiver: a stdout line that is not JSON ({e}): {line}");
                    continue;
                }
            };
            let mut lines = self.lock();
            if value.get("listening").is_some() {
                lines.listening = true;
            } else {
                lines.spans.push(value);
            }
            drop(lines);
            self.changed.notify_all();
        }
        self.lock().closed = true;
        self.changed.notify_all();
    }
}

impl OtlpReceiver {
    /// Starts a receiver on a free port (OTLP/HTTP only, no gRPC) and waits until it says it
    /// listens; fails, naming `scripts/install-test-servers`, if its program was not built.
    pub fn start() -> Result<Self> {
        let program = receiver_program()?;
        let dir = temp_dir("otlp");
        let port = free_port();
        let args = vec!["-http".into(), format!("127.0.0.1:{port}").into()];
        let mut daemon = Daemon::new(program, args, None, dir.path());
        // As `Daemon::spawn`, but with standard output to the reader thread.
        let log = File::options()
            .create(true)
            .append(true)
            .open(&daemon.log)?;
        let mut child = Command::new(&daemon.program)
            .args(&daemon.args)
            .current_dir(&daemon.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("spawn {}: {INSTALL_HINT}", daemon.program.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        daemon.child = Some(child);
        let received = Arc::new(Received::default());
        let reader = std::thread::Builder::new()
            .name("otlp-receiver stdout".into())
            .spawn({
                let received = Arc::clone(&received);
                move || received.read(stdout)
            });
        let reader = match reader {
            Ok(reader) => reader,
            Err(e) => {
                daemon.kill();
                return Err(e).context("spawn the otlp-receiver stdout reader");
            }
        };
        let receiver = OtlpReceiver {
            port,
            daemon,
            received,
            reader: Some(reader),
            _dir: dir,
        };
        let lines = receiver
            .received
            .wait(START_DEADLINE, |l| l.listening || l.closed);
        let (listening, closed) = (lines.listening, lines.closed);
        drop(lines);
        if !listening {
            let why = if closed {
                "exited during startup".to_owned()
            } else {
                format!("did not say it listens after {START_DEADLINE:?}")
            };
            // Dropping `receiver` kills it.
            bail!(
                "otlp-receiver {why}; last lines of {}:\n{}",
                receiver.daemon.log.display(),
                tail(&receiver.daemon.log, LOG_TAIL_LINES)
            );
        }
        Ok(receiver)
    }

    /// The OTLP/HTTP base URL, `http://127.0.0.1:PORT`: traces go to `/v1/traces` under it
    /// (protobuf or JSON).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far, in the order received.
    pub fn spans(&self) -> Vec<Value> {
        self.received.lock().spans.clone()
    }

    /// Waits until `pred` holds for the spans received so far (at most `timeout`) and returns
    /// them all; fails with what was received if it does not, or if the receiver exited.
    pub fn wait_for_spans(
        &self,
        pred: impl Fn(&[Value]) -> bool,
        timeout: Duration,
    ) -> Result<Vec<Value>> {
        let lines = self.received.wait(timeout, |l| l.closed || pred(&l.spans));
        if pred(&lines.spans) {
            return Ok(lines.spans.clone());
        }
        let why = if lines.closed {
            format!(
                "the OTLP receiver exited; last lines of {}:\n{}",
                self.daemon.log.display(),
                tail(&self.daemon.log, LOG_TAIL_LINES)
            )
        } else {
            format!("timed out after {timeout:?}")
        };
        let spans: Vec<String> = lines.spans.iter().map(Value::to_string).collect();
        bail!(
            "the spans received do not match ({why}); {} received:\n{}",
            spans.len(),
            spans.join("\n")
        )
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.daemon.kill();
        // Its standard output is closed now, so the reader has stopped or is about to.
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.daemon.report_if_panicking("otlp-receiver");
    }
}

/// `target/otlp-receiver/otlp-receiver`, which `scripts/install-test-servers` builds.
fn receiver_program() -> Result<PathBuf> {
    let program =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/otlp-receiver/otlp-receiver");
    if !program.exists() {
        bail!(
            "no OTLP receiver ({} not built): run scripts/install-test-servers to build it \
             (needs Go 1.26 or newer)",
            program.display()
        );
    }
    Ok(program)
}
