//! Command-line front end of brisk-bench.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};

use brisk_bench::fd_limit::raise_fd_limit;
use brisk_bench::http::{parse_header, run_http, HttpConfig, RequestSpec};
use brisk_bench::suite::{self, SuiteOptions};
use brisk_bench::units::parse_duration;
use brisk_bench::ws::{parse_source_ips, run_ws, WsConfig, WsMode, WsProtocol};
use brisk_bench::{BenchError, Scheme, Target};

/// Load generator and performance lab for Brisk and its peers.
#[derive(Parser)]
#[command(name = "brisk-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// HTTP/1.1 load generator (wrk/ab-like).
    Http(HttpArgs),
    /// WebSocket load: hold connections, echo latency, broadcast fan-out.
    Ws(WsArgs),
    /// The performance lab: run the scenarios of a suite config against its targets.
    Suite(SuiteArgs),
    /// Re-render report.md and report.html from a report.json.
    Render(RenderArgs),
}

#[derive(Args)]
struct SuiteArgs {
    /// Suite configuration.
    #[arg(long, default_value = "bench/suite.toml")]
    config: PathBuf,
    /// Targets to run, comma-separated (default: all configured).
    #[arg(long, value_delimiter = ',')]
    targets: Option<Vec<String>>,
    /// Scenarios to run, comma-separated, e.g. hello_keepalive,connections
    /// (default: every configured one).
    #[arg(long, value_delimiter = ',')]
    scenarios: Option<Vec<String>>,
    /// Output directory (default: bench/results/run-TIMESTAMP).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Repetitions per point (highest and lowest dropped when >= 3).
    #[arg(long)]
    reps: Option<usize>,
    /// Short runs: quick_duration, 3 repetitions, quick_points.
    #[arg(long)]
    quick: bool,
    /// Length of one measured run, e.g. 5s (overrides settings.duration and --quick's).
    #[arg(long, value_parser = duration_arg)]
    duration: Option<Duration>,
    /// Do not show progress on stderr.
    #[arg(long)]
    no_progress: bool,
    /// A sentence for the report header (overrides `settings.note`).
    #[arg(long)]
    note: Option<String>,
}

#[derive(Args)]
struct RenderArgs {
    /// A report.json written by `suite`.
    report: PathBuf,
    /// Output directory (default: the directory of the report).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

#[derive(Args)]
struct HttpArgs {
    /// Target, e.g. http://127.0.0.1:8080/path?query
    url: String,
    /// Concurrent connections.
    #[arg(short = 'c', long, default_value_t = 10)]
    connections: usize,
    /// Run length (10s, 500ms, 1m); default 10s unless -n is given.
    #[arg(short = 'd', long, value_parser = duration_arg)]
    duration: Option<Duration>,
    /// Total requests to attempt.
    #[arg(short = 'n', long)]
    requests: Option<u64>,
    /// Threads, each a single-threaded runtime owning connections/threads connections.
    #[arg(short = 't', long, default_value_t = 1)]
    threads: usize,
    /// Open a new connection per request and send `Connection: close`.
    #[arg(long)]
    no_keepalive: bool,
    /// Constant total rate in requests/s; latency counts from the scheduled send time.
    #[arg(short = 'R', long)]
    rate: Option<f64>,
    /// Request method.
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,
    /// Extra header "Name: value" (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Request body (sets Content-Length).
    #[arg(long)]
    body: Option<String>,
    /// Per-request timeout.
    #[arg(long, default_value = "5s", value_parser = duration_arg)]
    timeout: Duration,
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Hold,
    Echo,
    Broadcast,
}

#[derive(Args)]
struct WsArgs {
    /// Target, e.g. ws://127.0.0.1:8080/ws
    url: String,
    /// Load connections to open and hold (receivers in broadcast mode).
    #[arg(short = 'c', long, default_value_t = 10)]
    connections: usize,
    /// Connection attempts per second (default: all at once).
    #[arg(long)]
    ramp: Option<f64>,
    /// How long to hold the connections (or run messages) after the ramp.
    #[arg(long, default_value = "10s", value_parser = duration_arg)]
    hold: Duration,
    /// Threads the connections are spread over.
    #[arg(short = 't', long, default_value_t = 1)]
    threads: usize,
    /// Source addresses: 127.0.0.1,127.0.0.2 or 127.0.0.1-127.0.0.8.
    #[arg(long)]
    source_ips: Option<String>,
    /// Connect plus handshake timeout.
    #[arg(long, default_value = "5s", value_parser = duration_arg)]
    timeout: Duration,
    /// What the connections do.
    #[arg(long, value_enum, default_value_t = ModeArg::Hold)]
    mode: ModeArg,
    /// Messages/s: total over all connections (echo) or the sender's rate (broadcast).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Message size in bytes (minimum 16).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Broadcast: messages to publish (default: until --hold ends).
    #[arg(long)]
    messages: Option<u64>,
    /// Broadcast: URL of the sender connection (default: the target URL).
    #[arg(long)]
    sender_url: Option<String>,
    /// Broadcast: path of the sender connection on the target host.
    #[arg(long, conflicts_with = "sender_url")]
    send_path: Option<String>,
    /// Longest wait for outstanding messages after the last send.
    #[arg(long, default_value = "2s", value_parser = duration_arg)]
    drain: Duration,
    /// More URLs the load connections are spread over, round robin with the target
    /// (repeatable; e.g. the other instances of a cluster).
    #[arg(long)]
    spread: Vec<String>,
    /// What the connections speak over WebSocket: plain frames, Socket.IO 4 (URL
    /// `/socket.io/?EIO=4&transport=websocket`), Centrifuge's JSON protocol (URL
    /// `/connection/websocket`); both join the room/channel `chat`) or Brisk's channel
    /// protocol (URL `/connection/websocket`, with `--token`; channel `chat:bench`).
    #[arg(long, value_enum, default_value_t = ProtocolArg::Plain)]
    protocol: ProtocolArg,
    /// The connect token of `--protocol brisk` (e.g. from the demo's
    /// `/connection/token?user=bench`), or of `--protocol centrifuge` (Centrifugo's JWT).
    #[arg(long)]
    token: Option<String>,
    /// The channel `--protocol centrifuge` and `--protocol brisk` connections subscribe and
    /// publish to (default `chat`, and `chat:bench` for brisk).
    #[arg(long)]
    channel: Option<String>,
    /// How long the connections stay idle between the ramp and the messages (to sample the
    /// servers in between).
    #[arg(long, default_value = "0s", value_parser = duration_arg)]
    settle: Duration,
    /// Write this file (the number of open connections in it) when the ramp is done, as the
    /// settle time begins.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Write this file (the number of deliveries in it) when the messages are over, before the
    /// connections close.
    #[arg(long)]
    done_file: Option<PathBuf>,
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum ProtocolArg {
    Plain,
    Socketio,
    Centrifuge,
    Brisk,
}

fn http_config(args: &HttpArgs) -> Result<HttpConfig, BenchError> {
    let target = Target::parse(&args.url, Scheme::Http)?;
    let headers = args
        .headers
        .iter()
        .map(|h| parse_header(h))
        .collect::<Result<Vec<_>, _>>()?;
    let mut config = HttpConfig::new(target);
    config.connections = args.connections;
    config.threads = args.threads;
    config.duration = args.duration;
    config.requests = args.requests;
    config.rate = args.rate;
    config.timeout = args.timeout;
    config.request = RequestSpec {
        method: args.method.clone(),
        headers,
        body: args.body.clone(),
        keep_alive: !args.no_keepalive,
    };
    Ok(config)
}

fn ws_config(args: &WsArgs) -> Result<WsConfig, BenchError> {
    let target = Target::parse(&args.url, Scheme::Ws)?;
    let sender = match (&args.sender_url, &args.send_path) {
        (Some(url), _) => Some(Target::parse(url, Scheme::Ws)?),
        (None, Some(path)) => Some(target.with_path(path)),
        (None, None) => None,
    };
    let mut config = WsConfig::new(target);
    config.connections = args.connections;
    config.ramp = args.ramp;
    config.hold = args.hold;
    config.threads = args.threads;
    config.source_ips = match &args.source_ips {
        Some(list) => parse_source_ips(list)?,
        None => Vec::new(),
    };
    config.timeout = args.timeout;
    config.mode = match args.mode {
        ModeArg::Hold => WsMode::Hold,
        ModeArg::Echo => WsMode::Echo,
        ModeArg::Broadcast => WsMode::Broadcast,
    };
    config.rate = args.rate;
    config.size = args.size;
    config.messages = args.messages;
    config.sender = sender;
    config.drain = args.drain;
    config.spread = (args.spread.iter())
        .map(|u| Target::parse(u, Scheme::Ws))
        .collect::<Result<_, _>>()?;
    config.settle = args.settle;
    config.ready_file = args.ready_file.clone();
    config.done_file = args.done_file.clone();
    config.protocol = match args.protocol {
        ProtocolArg::Plain => WsProtocol::Plain,
        ProtocolArg::Socketio => WsProtocol::SocketIo,
        // Once per run: every connection gives the token.
        ProtocolArg::Centrifuge => WsProtocol::Centrifuge {
            token: (args.token.clone()).map(|t| &*Box::leak(t.into_boxed_str())),
            channel: leak_or(&args.channel, brisk_bench::ws::CHANNEL),
        },
        ProtocolArg::Brisk => {
            let token = args.token.clone().ok_or_else(|| {
                BenchError::InvalidArgument(
                    "--protocol brisk needs --token (a connect token)".into(),
                )
            })?;
            // Once per run: every connection gives it.
            WsProtocol::Brisk {
                token: Box::leak(token.into_boxed_str()),
                channel: leak_or(&args.channel, brisk_bench::ws::BRISK_CHANNEL),
            }
        }
    };
    Ok(config)
}

/// `given`, kept for the whole run (every connection uses it), or `default`.
fn leak_or(given: &Option<String>, default: &'static str) -> &'static str {
    match given {
        Some(s) => Box::leak(s.clone().into_boxed_str()),
        None => default,
    }
}

fn run(cli: Cli) -> Result<()> {
    raise_fd_limit();
    match cli.command {
        Command::Http(args) => {
            let report = run_http(&http_config(&args)?)?;
            if args.json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render_human());
            }
        }
        Command::Ws(args) => {
            let report = run_ws(&ws_config(&args)?)?;
            if args.json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render_human());
            }
        }
        Command::Suite(args) => {
            suite::process::install_interrupt_handler();
            let options = SuiteOptions {
                config: args.config,
                targets: args.targets,
                scenarios: args.scenarios,
                out: args.out,
                reps: args.reps,
                quick: args.quick,
                duration: args.duration,
                progress: !args.no_progress,
                note: args.note,
                command_line: std::env::args()
                    .map(|a| shell_quote(&a))
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            let outcome = suite::run_suite(&options)?;
            eprintln!("Report written to {}", outcome.out_dir.display());
            if !outcome.failures.is_empty() {
                anyhow::bail!(outcome.failures.join("\n"));
            }
        }
        Command::Render(args) => {
            let report = suite::read_report(&args.report)?;
            let dir = args.out.unwrap_or_else(|| {
                args.report
                    .parent()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("."))
            });
            suite::write_reports(&report, &dir)?;
        }
    }
    Ok(())
}

/// Quotes `arg` for a POSIX shell when it needs it.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./,:=@%+".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{err}");
            let usage = err
                .downcast_ref::<BenchError>()
                .is_some_and(BenchError::is_usage);
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}
