//! Published figures (from `/work/shared/reference/seed-figures.md` and the
//! peers measured on this project's machine) kept as data, so that every
//! report table can show them beside our numbers, labelled with their
//! hardware and never as if measured here.

/// One published table.
#[derive(Clone, Copy, Debug)]
pub struct Published {
    /// Source and section, e.g. `R1.3 Localzet Server`.
    pub source: &'static str,
    /// The hardware and setup the figures were taken on.
    pub hardware: &'static str,
    /// Column headers.
    pub columns: &'static [&'static str],
    /// Rows of cells.
    pub rows: &'static [&'static [&'static str]],
}

const R1_HW: &str = "Intel Xeon E5-2680 v4 (14 cores, 2.4 GHz), 64 GB, Ubuntu 22.04, PHP 8.2 + libuv, 14 worker processes";
const R3_HW: &str = "4-core / 4 GB cloud server, 16 processes, local load";
const R4_HW: &str = "macOS, i7-5557U 3.1 GHz, 16 GB, ab -k, 5 runs with highest and lowest dropped";
const HERE_HW: &str = "this project's 2-core machine, 2026-11-22 (peers-measured-here.md): 1 worker pinned to CPU0, load on CPU1";

/// The published tables shown beside `scenario`.
pub fn for_scenario(scenario: &str) -> Vec<Published> {
    match scenario {
        "hello_keepalive" => vec![
            Published {
                source: "R1.1 Localzet Server, HTTP Hello World",
                hardware: R1_HW,
                columns: &["requests/s", "p50 / p95 / p99", "memory per process", "CPU"],
                rows: &[&["85,000+", "0.8 / 2.1 / 4.5 ms", "25-30 MB", "85-95 %"]],
            },
            Published {
                source: "R3 webman guidance",
                hardware: R3_HW,
                columns: &["keep-alive", "Hello World QPS"],
                rows: &[&["on", "80,000-160,000"]],
            },
            Published {
                source: "Peers measured here, wrk -t1 -c100 -d10s (median of 9 runs)",
                hardware: HERE_HW,
                columns: &["server", "requests/s", "p50 ms", "p99 ms"],
                rows: &[
                    &["nginx 1.22.1", "104,930", "0.52", "1.06"],
                    &["node 20", "46,451", "2.26", "14.36"],
                    &["go 1.26", "53,631", "1.88", "4.63"],
                    &["workerman 5.2.2", "97,829", "0.99", "1.93"],
                ],
            },
        ],
        "hello_close" => vec![
            Published {
                source: "R3 webman guidance",
                hardware: R3_HW,
                columns: &["keep-alive", "Hello World QPS"],
                rows: &[&["off", "10,000-30,000"]],
            },
            Published {
                source: "Peers measured here, ab -c100 -n30000 (median of 3)",
                hardware: HERE_HW,
                columns: &["server", "requests/s"],
                rows: &[
                    &["nginx 1.22.1", "25,799"],
                    &["node 20", "10,597"],
                    &["go 1.26", "21,359"],
                    &["workerman 5.2.2", "24,499"],
                ],
            },
        ],
        "connections" | "view" => vec![Published {
            source: "R4 cf framework (Lua 5.3)",
            hardware: R4_HW,
            columns: &["clients", "latency (ms)", "requests/s", "CPU"],
            rows: &[
                &["100", "7-46", ">= 11,000", ">= 90 %"],
                &["200", "16-70", ">= 11,000", ">= 90 %"],
                &["500", "42-120", ">= 11,000", ">= 90 %"],
                &["800", "70-140", ">= 11,000", ">= 90 %"],
                &["1000", "86-270", ">= 11,000", ">= 90 %"],
                &["2000", "165-470", ">= 11,000", ">= 90 %"],
                &["5000", "408-550", ">= 11,000", ">= 90 %"],
            ],
        }],
        "workers" => vec![Published {
            source: "R1.7 Localzet Server, vertical scaling",
            hardware: R1_HW,
            columns: &["processes", "requests/s", "efficiency"],
            rows: &[
                &["1", "6,000", "100 %"],
                &["4", "24,000", "100 %"],
                &["8", "47,000", "98 %"],
                &["14", "85,000", "97 %"],
            ],
        }],
        "static_files" => vec![Published {
            source: "R1.3 Localzet Server, file responses",
            hardware: R1_HW,
            columns: &["file size", "requests/s", "memory"],
            rows: &[
                &["1 KB", "75,000", "25 MB"],
                &["100 KB", "45,000", "30 MB"],
                &["1 MB", "8,000", "35 MB"],
                &["10 MB", "1,200", "40 MB"],
                &["100 MB", "150", "45 MB"],
            ],
        }],
        "ws_idle" => vec![
            Published {
                source: "R1.4 Localzet Server, WebSocket connections",
                hardware: R1_HW,
                columns: &[
                    "processes",
                    "connections per process",
                    "memory per process",
                    "per connection",
                ],
                rows: &[
                    &["1", "50,000+", "180 MB", "3-4 KB"],
                    &["14", "50,000+ (700,000+ total)", "180 MB", "3-4 KB"],
                ],
            },
            Published {
                source: "Peers measured here, idle WebSocket connections",
                hardware: HERE_HW,
                columns: &["server", "connections", "KB per connection"],
                rows: &[
                    &["Node ws 8.23", "10,000", "6.19-6.23"],
                    &["Workerman 5.2.2 (select)", "10,000", "4.79"],
                ],
            },
        ],
        "ws_broadcast" => vec![Published {
            source: "R1.5 Localzet Server, WebSocket broadcast",
            hardware: R1_HW,
            columns: &["connections", "messages/s", "p99 latency"],
            rows: &[
                &["1,000", "100,000+", "5 ms"],
                &["10,000", "500,000+", "12 ms"],
                &["50,000", "1,000,000+", "45 ms"],
            ],
        }],
        "database" => vec![Published {
            source: "R3 webman, single DB query, 16 processes",
            hardware: R3_HW,
            columns: &["keep-alive on", "keep-alive off"],
            rows: &[&["10,000-20,000 QPS", "10,000 QPS"]],
        }],
        "database_mysql" => vec![Published {
            source: "R1.2 Localzet Server, HTTP with MySQL, 14 processes",
            hardware: R1_HW,
            columns: &["requests/s", "p50 / p95 / p99"],
            rows: &[&["12,000+", "5.2 / 18.5 / 45.0 ms"]],
        }],
        "database_orm" => vec![Published {
            source: "R3 webman, a random row of 100,000 as JSON",
            hardware: R3_HW,
            columns: &["raw PDO", "query builder", "ORM model"],
            rows: &[&["17,800 QPS", "9,400 QPS", "7,200 QPS"]],
        }],
        "database_blocking" => vec![Published {
            source: "R5 MixPHP, three SQL queries per request",
            hardware: "Docker, 1 CPU, PHP 7.2, Swoole 4.1",
            columns: &["mode", "processes", "concurrency", "requests/s"],
            rows: &[
                &["synchronous", "8", "100", "838.65"],
                &["synchronous", "8", "300", "683.78"],
                &["synchronous", "8", "500", "688.56"],
                &["synchronous", "50", "100", "770.69"],
                &["synchronous", "50", "300", "304.90"],
                &["synchronous", "50", "500", "378.95"],
                &["coroutine", "8", "100", "834.12"],
                &["coroutine", "8", "300", "837.50"],
                &["coroutine", "8", "500", "824.14"],
            ],
        }],
        "templates" => vec![
            Published {
                source: "R2 stack test: the three jobs, one request each (ms)",
                hardware: "nginx 1.0 + PHP-FPM 5.3 (2011-era hardware)",
                columns: &["engine", "3 variables", "1,000-row table", "typical page"],
                rows: &[
                    &["CT++", "4-5", "33", "27 (under load)"],
                    &["Smarty 3", "6-7", "79-112", "79-101 (under load)"],
                    &["Twig 1", "6-7", "82-110", "82-104 (under load)"],
                ],
            },
            Published {
                source: "R2 stack test, typical page under load",
                hardware: "nginx 1.0 + PHP-FPM 5.3 (2011-era hardware)",
                columns: &["engine", "requests/s", "memory at full load"],
                rows: &[
                    &["CT++", "1531", "324 MB"],
                    &["Smarty 3", "1213", "387 MB"],
                    &["Twig 1", "1191", "372 MB"],
                ],
            },
        ],
        "blocks" => vec![Published {
            source: "R2 stack test, a page of cached blocks merged into JSON",
            hardware: "nginx 1.0 + PHP-FPM 5.3 + Redis 2.2 (2011-era hardware)",
            columns: &["blocks", "requests/s", "latency"],
            rows: &[
                &["5", "1222", "14 ms alone, 66-79 ms under ab -c 100"],
                &["45", "1151", "66-79 ms under ab -c 100"],
            ],
        }],
        "login_page" => vec![Published {
            source: "R4 cf framework, template page, 500 clients",
            hardware: R4_HW,
            columns: &["cache / keep-alive", "requests/s"],
            rows: &[
                &["both off", "1400-1700"],
                &["keep-alive only", "2030-2230"],
                &["cache only", "4238-6000"],
                &["both on", "7400-8500"],
            ],
        }],
        "dashboard" => vec![Published {
            source: "R4 cf framework, admin dashboard (auth, redirects, queries, template)",
            hardware: R4_HW,
            columns: &[
                "DB pool",
                "latency without keep-alive and cache",
                "with them",
            ],
            rows: &[
                &["100", "800-1313 ms", "~400-500 ms"],
                &["500", "500-1100 ms", "~400-500 ms"],
                &["1000", "211-620 ms", "~400-500 ms"],
            ],
        }],
        "http_client" => vec![Published {
            source: "R4 cf framework, HTTP client (the same work in each mode)",
            hardware: R4_HW,
            columns: &["mode", "time"],
            rows: &[
                &["a plain request each", "1.2 s"],
                &["a reused connection", "1.0 s"],
                &["several endpoints at once", "0.2 s"],
            ],
        }],
        "generator_check" => vec![Published {
            source: "Peers measured here, CPU per request",
            hardware: HERE_HW,
            columns: &["server", "requests/s", "CPU µs per request"],
            rows: &[&["nginx", "138.3k / 140.7k", "6.65 / 6.51"]],
        }],
        _ => Vec::new(),
    }
}
