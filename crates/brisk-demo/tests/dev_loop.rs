//! `dev` (issue 36): the development loop starts the app, rebuilds it on each change to a
//! watched file and swaps the build in with `upgrade`, a WebSocket client of an endpoint that
//! survives reloads staying connected; a build that fails leaves the last good one serving;
//! Ctrl-C stops the app and the loop. The program here is a copy of the demo,
//! and the "build" a script that replaces the file (a new inode, as a linker writes one) or
//! fails while `src/broken` exists.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use brisk_testkit::*;

mod common;
use common::{demo_args, Spawned, DEMO};

/// `PROGRAM ARGS --run-dir RUN dev --watch SRC --build BUILD` in its own process group
/// (killed on drop), its output in `log`.
fn start_dev(
    program: &Path,
    args: &[String],
    run: &Path,
    src: &Path,
    build: &str,
    log: &Path,
) -> Spawned {
    let out = std::fs::File::create(log).unwrap();
    Spawned::new(
        Command::new(program)
            .args(args)
            .arg("--run-dir")
            .arg(run)
            .args(["dev", "--watch"])
            .arg(src)
            .args(["--build", build])
            .env_remove("DATABASE_URL")
            .env_remove("REDIS_URL")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out),
    )
}

#[test]
fn dev_rebuilds_on_a_change_swaps_the_build_in_and_keeps_the_last_good_one_on_a_failure() {
    let dir = temp_dir("dev-loop");
    let app = dir.path().join("app");
    std::fs::copy(DEMO, &app).unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("main.rs"), "fn main() {}\n").unwrap();
    let build = dir.path().join("build.sh");
    std::fs::write(
        &build,
        format!(
            "#!/bin/sh\n\
             if [ -e {src}/broken ]; then echo 'error: it does not compile' >&2; exit 1; fi\n\
             cp {demo} {app}.new && mv {app}.new {app}\n",
            src = src.display(),
            demo = DEMO,
            app = app.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&build, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = dir.path().join("run");
    let _masters = RunDirGuard(run.clone());
    let log = dir.path().join("dev.log");
    let (args, http) = demo_args(1);
    let build = format!("sh {}", build.display());
    let mut dev = start_dev(&app, &args, &run, &src, &build, &log);
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    let pid_file = run.join("brisk-demo.pid");
    let master = || -> Option<i32> { std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok() };
    wait_until(Duration::from_secs(30), "dev to start the app", || {
        said().contains("dev: brisk-demo serves")
    });
    let first = master().expect("a pid file");
    assert_eq!(http_get(http, "/").map(|r| r.0), Some(200), "{}", said());
    let (mut ws, _) =
        tungstenite::client(format!("ws://127.0.0.1:{http}/ws/durable"), connect(http)).unwrap();
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    ws.send(tungstenite::Message::text("before")).unwrap();
    assert_eq!(ws.read().unwrap(), tungstenite::Message::text("before"));

    // An edit: one build, and the new build takes over.
    std::fs::write(src.join("main.rs"), "fn main() { println!(\"v2\"); }\n").unwrap();
    let second = wait_for(Duration::from_secs(60), "a new master", || {
        master().filter(|&pid| pid != first)
    });
    wait_until(Duration::from_secs(10), "dev to say so", || {
        said().contains("swapped in")
    });
    assert_eq!(http_get(http, "/").map(|r| r.0), Some(200), "{}", said());
    // The WebSocket client moved to the new build's worker, and knows it.
    ws.send(tungstenite::Message::text("/moves")).unwrap();
    assert_eq!(ws.read().unwrap(), tungstenite::Message::text("moves: 1"));

    // An edit that does not build: the last good build serves on.
    std::fs::write(src.join("broken"), "fn main() {\n").unwrap();
    wait_until(Duration::from_secs(30), "the failed build", || {
        said().contains("the build failed")
    });
    assert!(said().contains("error: it does not compile"));
    assert_eq!(master(), Some(second));
    assert_eq!(http_get(http, "/").map(|r| r.0), Some(200), "{}", said());

    // Ctrl-C (SIGINT to the loop): the app stops, the loop ends.
    // SAFETY: signalling the test's own child.
    unsafe { libc::kill(dev.0.id() as i32, libc::SIGINT) };
    let ended = poll(Duration::from_secs(30), || dev.0.try_wait().unwrap());
    assert!(ended.is_some_and(|s| s.success()), "{ended:?}\n{}", said());
    assert!(!servers::alive(second), "the app was left running");
    assert_eq!(master(), None, "the pid file is left");
}

#[test]
fn the_app_stops_when_its_dev_loop_is_killed() {
    let dir = temp_dir("dev-loop-killed");
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let run = dir.path().join("run");
    let _masters = RunDirGuard(run.clone());
    let log = dir.path().join("dev.log");
    let (args, http) = demo_args(1);
    let mut dev = start_dev(Path::new(DEMO), &args, &run, &src, "true", &log);
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until(Duration::from_secs(30), "dev to start the app", || {
        said().contains("dev: brisk-demo serves")
    });
    let pid_file = run.join("brisk-demo.pid");
    let master: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(http_get(http, "/").map(|r| r.0), Some(200), "{}", said());
    // SIGKILL to the loop alone: it cannot stop the app; the app stops by itself.
    dev.0.kill().unwrap();
    dev.0.wait().unwrap();
    wait_until(Duration::from_secs(20), "the app to stop", || {
        !servers::alive(master)
    });
    assert!(said().contains("is gone; stopping"), "{}", said());
    assert!(!pid_file.exists(), "the pid file is left");
}
