//! Suite configuration errors are plain messages naming the culprit.

use brisk_bench::suite::config::{parse_cpu_list, parse_size, SuiteConfig};

const TARGET: &str = r#"
[targets.t]
description = "d"
command = ["true"]
port = 1
"#;

fn err(text: &str) -> String {
    SuiteConfig::parse(text, "suite.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn the_repository_config_parses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/suite.toml");
    let config = SuiteConfig::load(std::path::Path::new(path)).unwrap();
    for name in ["brisk", "nginx", "node", "go", "php"] {
        assert!(config.targets.contains_key(name), "{name}");
    }
}

#[test]
fn unknown_key_is_named() {
    let msg = err(&format!("[settings]\nrepz = 3\n{TARGET}"));
    assert!(msg.contains("repz"), "{msg}");
    assert!(msg.starts_with("suite.toml"), "{msg}");
    let msg = err(&format!("{TARGET}colour = \"red\"\n"));
    assert!(msg.contains("colour"), "{msg}");
}

#[test]
fn unknown_scenario_is_named() {
    let msg = err(&format!("{TARGET}\n[scenarios.hello_wrld]\n"));
    assert!(msg.contains("hello_wrld"), "{msg}");
    let msg = err(&format!("{TARGET}unsupported = [\"ws_idel\"]\n"));
    assert!(msg.contains("ws_idel"), "{msg}");
}

#[test]
fn unknown_target_is_named() {
    let config = SuiteConfig::parse(TARGET, "suite.toml").unwrap();
    let msg = config
        .select_targets(Some(&["nginz".to_string()]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("nginz"), "{msg}");
    let msg = err(&format!(
        "{TARGET}\n[scenarios.generator_check]\ntarget = \"ngnx\"\n"
    ));
    assert!(msg.contains("ngnx"), "{msg}");
}

#[test]
fn bad_values_are_named() {
    let msg = err(&format!("[settings]\nduration = \"ten\"\n{TARGET}"));
    assert!(msg.contains("ten"), "{msg}");
    assert_eq!(parse_cpu_list("0,2-3").unwrap(), vec![0, 2, 3]);
    assert!(parse_cpu_list("3-1").is_err());
    assert_eq!(parse_size("100KB").unwrap(), 102_400);
    assert_eq!(parse_size("10MB").unwrap(), 10 << 20);
    assert!(parse_size("1 parsec").is_err());
    let msg = err(&format!(
        "{TARGET}\n[scenarios.ws_broadcast]\npoints = [10]\nrate = 50.0\nmax_deliveries = 0.0\n"
    ));
    assert!(msg.contains("max_deliveries"), "{msg}");
}

#[test]
fn a_database_scenario_names_what_it_cannot_find() {
    let msg = err(&format!(
        "{TARGET}\n[scenarios.database]\ndatabase = \"postgress\"\npaths = [\"/db\"]\n"
    ));
    assert!(msg.contains("unknown database \"postgress\""), "{msg}");
    let db = "[databases.pg]\ndescription = \"d\"\ncommand = [\"true\"]\nport = 1\nurl = \"postgres://x\"\n";
    let msg = err(&format!(
        "{TARGET}\n{db}[scenarios.database]\ndatabase = \"pg\"\npaths = [\"/db\"]\ntargets = [\"nginz\"]\n"
    ));
    assert!(msg.contains("unknown target \"nginz\""), "{msg}");
    let msg = err(&format!(
        "{TARGET}\n{db}[scenarios.database]\ndatabase = \"pg\"\npaths = []\n"
    ));
    assert!(msg.contains("no paths"), "{msg}");
}
