//! The container image definition and the Kubernetes manifests in `deploy/` (issue 36). No
//! container runtime or cluster runs on this machine, so the test checks what can be checked
//! here: the image's command and the pod's command run as they are (with paths, ports and the
//! Redis address moved to this machine's) and serve, their probes answering on the ports the
//! manifests probe; the pre-stop command and the image's stop signal stop them gracefully;
//! the pod talks to a Redis run with the Redis container's own command and the secrets
//! `make-secrets.sh` makes (TLS only, a password); and the files agree with each other
//! (ports, selectors, the Redis Service `REDIS_URL` names, the secrets, the network policies).

use std::process::Command;
use std::time::Duration;

use brisk_testkit::*;
use serde::Deserialize;
use serde_json::Value as Json;

mod common;
use common::{get, Spawned, DEMO};

fn deploy_file(path: &str) -> String {
    let full = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/").to_string() + path;
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// The argument of a Containerfile instruction (the last one of that name).
fn instruction(file: &str, name: &str) -> String {
    (file.lines().rev())
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in the Containerfile"))
        .trim()
        .to_string()
}

/// The documents of a manifest file.
fn manifests(path: &str) -> Vec<Json> {
    let text = deploy_file(path);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Json::deserialize(doc).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

fn kind<'a>(docs: &'a [Json], kind: &str) -> &'a Json {
    (docs.iter())
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn strings(v: &Json) -> Vec<String> {
    (v.as_array().unwrap().iter())
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// The port of `--flag http://HOST:PORT` in `args`.
fn port_of(args: &[String], flag: &str) -> u16 {
    let at = args.iter().position(|a| a == flag).unwrap();
    args[at + 1].rsplit(':').next().unwrap().parse().unwrap()
}

/// A container's `ports` entry named `name`: its containerPort.
fn container_port(container: &Json, name: &str) -> u16 {
    (container["ports"].as_array().unwrap().iter())
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no port {name}"))["containerPort"]
        .as_u64()
        .unwrap() as u16
}

/// Where the files' fixed places are on this machine.
struct Here {
    dir: TempDir,
    http: u16,
    metrics: u16,
    /// The port of Redis's TLS listener.
    redis: u16,
}

impl Here {
    fn new() -> Here {
        Here {
            dir: temp_dir("deploy"),
            http: free_port(),
            metrics: free_port(),
            redis: free_port(),
        }
    }

    /// Where the secrets `make-secrets.sh` made are.
    fn secrets(&self) -> std::path::PathBuf {
        self.dir.path().join("secrets")
    }

    /// The secret file `name`.
    fn secret(&self, name: &str) -> String {
        std::fs::read_to_string(self.secrets().join(name)).unwrap()
    }

    /// `text` with the image's paths, the ports and the Redis address made this machine's,
    /// and the demo's other listeners on free ports.
    fn moved(&self, text: &str) -> String {
        let data = self.dir.path().join("data");
        let run = self.dir.path().join("run");
        std::fs::create_dir_all(&data).unwrap();
        let statics = concat!(env!("CARGO_MANIFEST_DIR"), "/static");
        let mut text = text.to_string();
        for (from, to) in [
            ("/usr/local/bin/brisk-demo", DEMO.to_string()),
            ("0.0.0.0:8080", format!("127.0.0.1:{}", self.http)),
            ("0.0.0.0:9100", format!("127.0.0.1:{}", self.metrics)),
            ("/usr/share/brisk-demo/static", statics.to_string()),
            ("/var/lib/brisk-demo", data.display().to_string()),
            ("/run/brisk-demo", run.display().to_string()),
            ("/etc/redis-tls", self.secrets().display().to_string()),
            ("@redis:6379", format!("@localhost:{}", self.redis)),
            ("tls-port 6379", format!("tls-port {}", self.redis)),
            ("dir /data", format!("dir {}", data.display())),
        ] {
            text = text.replace(from, &to);
        }
        text
    }

    /// Runs `argv` (the program, then `… --run-dir DIR start`) in the foreground, waits
    /// until its metrics listener says it is ready.
    fn run(&self, argv: &[String], env: &[(&str, &str)]) -> std::process::Child {
        let (program, args) = argv.split_first().unwrap();
        assert_eq!(program, DEMO);
        let mut args = args.to_vec();
        let at = args.iter().position(|a| a == "--run-dir").unwrap();
        for (i, flag) in ["--text", "--frame", "--websocket"].iter().enumerate() {
            let scheme = ["text", "frame", "websocket"][i];
            args.insert(at, format!("{scheme}://127.0.0.1:{}", free_port()));
            args.insert(at, flag.to_string());
        }
        let log = std::fs::File::create(self.dir.path().join("out.log")).unwrap();
        let child = Command::new(program)
            .args(&args)
            .env_remove("DATABASE_URL")
            .env_remove("REDIS_URL")
            .envs(env.iter().copied())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let metrics = self.metrics;
        wait_until(Duration::from_secs(30), "/readyz to answer 200", || {
            http_get(metrics, "/readyz").is_some_and(|(status, _)| status == 200)
        });
        child
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("out.log")).unwrap_or_default()
    }
}

/// Waits for `child` to exit; whether it exited successfully.
fn exits_cleanly(child: &mut std::process::Child) -> bool {
    poll(Duration::from_secs(20), || child.try_wait().unwrap()).is_some_and(|s| s.success())
}

#[test]
fn the_container_image_command_serves_and_stops_on_its_stop_signal() {
    let file = deploy_file("container/Containerfile");
    let entrypoint: Vec<String> = serde_json::from_str(&instruction(&file, "ENTRYPOINT")).unwrap();
    let cmd: Vec<String> = serde_json::from_str(&instruction(&file, "CMD")).unwrap();
    assert_eq!(entrypoint, ["/usr/local/bin/brisk-demo"]);
    // What it exposes is what it listens on; its volume holds the database.
    let exposed = instruction(&file, "EXPOSE");
    let (http, metrics) = (port_of(&cmd, "--http"), port_of(&cmd, "--metrics"));
    assert_eq!(exposed, format!("{http} {metrics}"));
    let volume = instruction(&file, "VOLUME");
    assert!(
        cmd.iter().any(|a| a.contains(&format!("sqlite:{volume}/"))),
        "{cmd:?}"
    );
    // What it copies into the image exists here; the build context leaves out what it must.
    assert!(file.contains("COPY crates/brisk-demo/static /usr/share/brisk-demo/static"));
    let ignored =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.dockerignore"))
            .unwrap();
    for dir in ["target/", ".git/"] {
        assert!(
            ignored.lines().any(|l| l == dir),
            "{dir} not in .dockerignore"
        );
    }
    assert!(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/static/index.html")).exists()
    );

    let here = Here::new();
    let argv: Vec<String> = entrypoint
        .iter()
        .chain(&cmd)
        .map(|a| here.moved(a))
        .collect();
    let mut demo = here.run(&argv, &[]);
    assert_eq!(get(here.http, "/").status, 200, "{}", here.output());
    assert_eq!(get(here.http, "/static/1k.txt").status, 200);
    assert_eq!(http_get(here.metrics, "/healthz").unwrap().0, 200);
    assert!(here.dir.path().join("data/brisk-demo.sqlite").exists());
    // `docker stop` sends the image's STOPSIGNAL: a graceful stop.
    assert_eq!(instruction(&file, "STOPSIGNAL"), "SIGQUIT");
    let kill = Command::new("kill")
        .args(["-QUIT", &demo.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert!(exits_cleanly(&mut demo), "{}", here.output());
}

#[test]
fn the_kubernetes_manifests_agree_and_the_pod_command_serves_and_stops() {
    let app = manifests("kubernetes/brisk-demo.yaml");
    let redis_docs = manifests("kubernetes/redis.yaml");
    let deployment = kind(&app, "Deployment");
    let pod = &deployment["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    assert_eq!(&deployment["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(&kind(&app, "Service")["spec"]["selector"], labels);
    assert_eq!(
        &kind(&app, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        labels
    );
    let container = &pod["spec"]["containers"][0];
    let args = strings(&container["args"]);
    // The probes ask the metrics listener; the Service sends traffic to the HTTP listener.
    assert_eq!(
        container_port(container, "metrics"),
        port_of(&args, "--metrics")
    );
    assert_eq!(container_port(container, "http"), port_of(&args, "--http"));
    assert_eq!(
        kind(&app, "Service")["spec"]["ports"][0]["targetPort"],
        "http"
    );
    for (probe, path) in [
        ("startupProbe", "/readyz"),
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
    ] {
        assert_eq!(container[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(container[probe]["httpGet"]["port"], "metrics", "{probe}");
    }
    // REDIS_URL (from the demo's secret) names the Redis Service and its port, over TLS,
    // trusting the CA of the Redis secret's that the pod mounts.
    let env_from = |container: &Json, name: &str| -> (String, String) {
        let var = (container["env"].as_array().unwrap().iter())
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {container}"));
        let key = &var["valueFrom"]["secretKeyRef"];
        (
            key["name"].as_str().unwrap().into(),
            key["key"].as_str().unwrap().into(),
        )
    };
    assert_eq!(
        env_from(container, "REDIS_URL"),
        ("brisk-demo".into(), "redis-url".into())
    );
    assert!(
        !args.iter().any(|a| a == "--redis"),
        "a password in --redis shows in ps"
    );
    let redis_service = kind(&redis_docs, "Service");
    let redis_port = redis_service["spec"]["ports"][0]["port"].as_u64().unwrap();
    let redis_name = redis_service["metadata"]["name"].as_str().unwrap();
    let secrets_script = deploy_file("kubernetes/make-secrets.sh");
    assert!(
        secrets_script.contains(&format!("rediss://:%s@{redis_name}:{redis_port}")),
        "make-secrets.sh's redis-url"
    );
    let ca = &args[args.iter().position(|a| a == "--redis-ca").unwrap() + 1];
    let pod_volumes = pod["spec"]["volumes"].as_array().unwrap();
    let mounted_secret = |container: &Json, volumes: &[Json], path: &str| -> String {
        let mount = (container["volumeMounts"].as_array().unwrap().iter())
            .find(|m| path.starts_with(m["mountPath"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("{path} is not mounted"));
        let volume = volumes.iter().find(|v| v["name"] == mount["name"]).unwrap();
        volume["secret"]["secretName"].as_str().unwrap().to_owned()
    };
    assert_eq!(mounted_secret(container, pod_volumes, ca), "redis-tls");
    let redis_pod = &kind(&redis_docs, "Deployment")["spec"]["template"];
    let redis_container = &redis_pod["spec"]["containers"][0];
    let redis_volumes = redis_pod["spec"]["volumes"].as_array().unwrap();
    assert_eq!(
        env_from(redis_container, "REDIS_PASSWORD"),
        ("redis".into(), "password".into())
    );
    // Redis's configuration, as its command gives it on standard input.
    let redis_command = strings(&redis_container["command"]);
    let redis_script = strings(&redis_container["args"]).concat();
    assert_eq!(redis_command, ["sh", "-c"]);
    let config: Vec<(&str, &str)> = (redis_script.lines())
        .filter_map(|l| l.trim().split_once(' '))
        .collect();
    let setting = |name: &str| config.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    assert_eq!(setting("port"), Some("0"), "plain text refused");
    assert_eq!(setting("tls-port"), Some(redis_port.to_string().as_str()));
    assert_eq!(setting("requirepass"), Some("$REDIS_PASSWORD"));
    assert_eq!(setting("maxmemory-policy"), Some("volatile-lru"));
    assert!(setting("maxmemory").is_some(), "{redis_script}");
    for file in ["tls-cert-file", "tls-key-file", "tls-ca-cert-file"] {
        let path = setting(file).unwrap();
        assert_eq!(
            mounted_secret(redis_container, redis_volumes, path),
            "redis-tls"
        );
    }
    assert_eq!(
        u64::from(container_port(redis_container, "redis")),
        redis_port
    );
    // Each pod: the runtime's seccomp profile, no service-account token; only the demo's
    // pods reach Redis; the demo's metrics port only from Prometheus.
    for p in [pod, redis_pod] {
        assert_eq!(p["spec"]["automountServiceAccountToken"], false);
        assert_eq!(
            p["spec"]["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
    }
    let redis_policy = &kind(&redis_docs, "NetworkPolicy")["spec"];
    assert_eq!(
        &redis_policy["podSelector"]["matchLabels"],
        &redis_pod["metadata"]["labels"]
    );
    let allowed = &redis_policy["ingress"];
    assert_eq!(allowed.as_array().unwrap().len(), 1, "{allowed}");
    assert_eq!(&allowed[0]["from"][0]["podSelector"]["matchLabels"], labels);
    assert_eq!(allowed[0]["ports"][0]["port"], "redis");
    let demo_policy = &kind(&app, "NetworkPolicy")["spec"];
    assert_eq!(&demo_policy["podSelector"]["matchLabels"], labels);
    for rule in demo_policy["ingress"].as_array().unwrap() {
        if rule["ports"][0]["port"] == "metrics" {
            assert_eq!(
                rule["from"][0]["podSelector"]["matchLabels"]["app"],
                "prometheus"
            );
        } else {
            assert_eq!(
                rule["ports"],
                serde_json::json!([{ "port": "http" }]),
                "{rule}"
            );
        }
    }
    // A read-only root needs a writable /tmp (SQLite's temporary files).
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert!(
        mounts.iter().any(|m| m["mountPath"] == "/tmp"),
        "{mounts:?}"
    );
    let secret = &container["env"][0];
    assert_eq!(secret["name"], "BRISK_CLUSTER_SECRET");
    // The pod runs the image's program.
    let image = deploy_file("container/Containerfile");
    let entrypoint: Vec<String> = serde_json::from_str(&instruction(&image, "ENTRYPOINT")).unwrap();

    // The secrets, as make-secrets.sh makes them (with `localhost` in the certificate too:
    // here the Service name does not resolve).
    let here = Here::new();
    let made = Command::new("sh")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/kubernetes/make-secrets.sh"
        ))
        .arg(here.secrets())
        .env("REDIS_TLS_NAMES", "redis,localhost")
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    // Redis, run with its container's command, the password from its secret.
    let redis_script = here.moved(&redis_script);
    let _redis = Spawned::new(
        Command::new(&redis_command[0])
            .args(&redis_command[1..])
            .arg(&redis_script)
            .env("REDIS_PASSWORD", here.secret("redis-password"))
            .stdout(std::process::Stdio::null()),
    );
    let ca = here.secrets().join("ca.crt");
    let port = here.redis.to_string();
    let cli = |auth: Option<String>| {
        let mut c = Command::new("redis-cli");
        c.args([
            "--tls",
            "--cacert",
            ca.to_str().unwrap(),
            "-h",
            "localhost",
            "-p",
            &port,
        ]);
        c.args(["PING"]).env_remove("REDISCLI_AUTH");
        if let Some(auth) = auth {
            c.env("REDISCLI_AUTH", auth);
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    wait_until(Duration::from_secs(10), "Redis to answer over TLS", || {
        cli(Some(here.secret("redis-password"))).contains("PONG")
    });
    assert!(cli(None).contains("NOAUTH"), "{}", cli(None));
    let guessed = cli(Some("a-guess".into()));
    assert!(guessed.contains("NOAUTH"), "{guessed}");
    // The pod's command here, with the environment the manifest gives it.
    let argv: Vec<String> = entrypoint
        .iter()
        .chain(&args)
        .map(|a| here.moved(a))
        .collect();
    let mut demo = here.run(
        &argv,
        &[
            ("BRISK_CLUSTER_SECRET", &here.secret("cluster-secret")),
            ("REDIS_URL", &here.moved(&here.secret("redis-url"))),
        ],
    );
    // /chat rooms, and so the bus, on that Redis: the demo is subscribed.
    wait_until(Duration::from_secs(10), "the cluster bus connected", || {
        let status = Command::new(DEMO)
            .args([
                "--run-dir",
                &here.moved("/run/brisk-demo"),
                "status",
                "--json",
            ])
            .output()
            .unwrap();
        let status: Json = serde_json::from_slice(&status.stdout).unwrap_or_default();
        status["cluster"]["connected"] == true
    });
    assert_eq!(get(here.http, "/").status, 200, "{}", here.output());
    assert_eq!(http_get(here.metrics, "/healthz").unwrap().0, 200);
    // The pre-stop hook: a graceful stop through the run directory the pod uses.
    let pre_stop = strings(&container["lifecycle"]["preStop"]["exec"]["command"]);
    let pre_stop: Vec<String> = pre_stop.iter().map(|a| here.moved(a)).collect();
    let out = Command::new(&pre_stop[0])
        .args(&pre_stop[1..])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(exits_cleanly(&mut demo), "{}", here.output());
}
