//! App settings (`brisk::config`) through the fixture's `--settings FILE` and `FIXTURE_*`
//! variables: loaded once by the master, every worker sees the same (a secret from the
//! environment too, which is not in their environment), a worker started after the file
//! changed still gets the master's, a wrong value fails `start` with its key and the reason,
//! and `status` and `stop` work while the file is wrong.

use std::time::Duration;

use brisk_testkit::*;

const FIXTURE: &str = env!("CARGO_BIN_EXE_brisk-fixture");

/// `/settings` as the worker that answered sees it.
fn seen(port: u16) -> serde_json::Value {
    let (status, body) = http_get(port, "/settings").expect("the fixture answers");
    assert_eq!(status, 200);
    serde_json::from_slice(&body).unwrap()
}

#[test]
fn settings_load_once_in_the_master_and_reach_every_worker_as_they_were() {
    let dir = temp_dir("settings");
    let file = dir.path().join("fixture.toml");
    std::fs::write(&file, "greeting = \"hello from the file\"\nworkers = 2\n").unwrap();
    let port = free_port();
    let http = format!("http://127.0.0.1:{port}");
    let file_arg = file.display().to_string();
    let args = ["--http", &http, "--settings", &file_arg];
    let env = [("FIXTURE_TOKEN", "s3cret-token")];
    // Two workers: the file said so.
    let mut server = ServerProcess::start_with_env(FIXTURE, &args, &env, 2).unwrap();
    let pids = server.worker_pids().unwrap();
    let mut answered = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let s = seen(port);
        assert_eq!(s["settings"]["greeting"], "hello from the file", "{s}");
        assert_eq!(s["settings"]["token"], "s3cret-token", "{s}");
        assert_eq!(s["token_in_environment"], false, "{s}");
        answered.insert(s["pid"].as_i64().unwrap());
        if answered.len() == 2 {
            break;
        }
    }
    assert_eq!(
        answered.len(),
        2,
        "both workers answered: {answered:?} of {pids:?}"
    );

    // The file changes (and is wrong now): a worker started since still gets the master's
    // settings, and the commands that need none work.
    std::fs::write(&file, "greeting = 42\n").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pids[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until(
        Duration::from_secs(10),
        "the killed worker replaced",
        || {
            server
                .worker_pids()
                .is_ok_and(|p| p.len() == 2 && !p.contains(&pids[0]))
        },
    );
    for _ in 0..20 {
        assert_eq!(seen(port)["settings"]["greeting"], "hello from the file");
    }
    server.cli_ok(&["status"]);
    server.cli_ok(&["stop"]);
    assert!(server.wait_exit(Duration::from_secs(20)).unwrap());
}

#[test]
fn a_wrong_setting_fails_the_start_with_its_key_and_the_reason() {
    let dir = temp_dir("settings");
    let file = dir.path().join("fixture.toml");
    std::fs::write(&file, "greeting = \"hi\"\nworkers = \"many\"\n").unwrap();
    let http = format!("http://127.0.0.1:{}", free_port());
    let file_arg = file.display().to_string();
    let args = ["--http", &http, "--settings", &file_arg];
    let out = ServerProcess::start_fails(FIXTURE, &args, &[]);
    assert!(out.contains("settings:"), "{out}");
    assert!(out.contains("workers"), "{out}");
    assert!(out.contains("many"), "{out}");
    // An unknown key, from the environment this time.
    std::fs::write(&file, "greeting = \"hi\"\n").unwrap();
    let env = [("FIXTURE_GRETING", "typo")];
    let out = ServerProcess::start_fails(FIXTURE, &args, &env);
    assert!(out.contains("greting"), "{out}");
}
