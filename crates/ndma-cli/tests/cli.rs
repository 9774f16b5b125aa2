//! The `ndma` binary end to end. No wall-clock thresholds: only exit codes and printed structure.
//!
//! Commands run with the CLI's default silicon budgets, so a lost completion fails a test after the driver's
//! poll budget (milliseconds) instead of hanging it.

use std::path::PathBuf;
use std::process::{Command, Output};

fn ndma(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ndma")).args(args).env("RUST_LOG", "off").output().expect("run ndma")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(args: &[&str]) -> String {
    let o = ndma(args);
    assert!(
        o.status.success(),
        "ndma {args:?} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// Rows of the inspect table: (index, length, whole line).
fn inspect_rows(out: &str) -> Vec<(usize, u32, String)> {
    out.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let idx = f.next()?.parse().ok()?;
            let _phase: u8 = f.next()?.parse().ok()?;
            let _tx = f.next()?;
            let _rx = f.next()?;
            let len = f.next()?.parse().ok()?;
            Some((idx, len, l.to_string()))
        })
        .collect()
}

#[test]
fn inspect_200000_shows_four_data_pairs_then_the_marker() {
    let out = ok(&["inspect", "--size", "200000"]);
    let rows = inspect_rows(&out);
    let data: Vec<_> = rows.iter().filter(|r| r.2.contains(" data")).collect();
    let markers: Vec<_> = rows.iter().filter(|r| r.2.contains("marker")).collect();
    assert_eq!(data.iter().map(|r| r.1).collect::<Vec<_>>(), [65536, 65536, 65536, 3392], "{out}");
    assert_eq!(markers.len(), 1, "{out}");
    assert_eq!(rows.len(), 5, "{out}");
    let marker = markers[0];
    assert_eq!((marker.0, marker.1), (4, 4), "the marker is the 4-byte pair after the data: {out}");
    assert!(marker.2.contains("completion+0 → +4"), "{out}");
    for (i, r) in data.iter().enumerate() {
        assert_eq!(r.0, i, "data pairs come first, in order: {out}");
        assert!(r.2.contains("FIRST|LAST"), "{out}");
        assert_eq!(r.2.contains("WRITE_BARRIER"), i == 3, "only the last data pair has the write barrier: {out}");
    }
    assert!(!marker.2.contains("WRITE_BARRIER"), "{out}");
    assert!(out.contains("carries WRITE_BARRIER: yes"), "{out}");
}

#[test]
fn inspect_works_in_every_direction() {
    for dir in ["h2d", "d2h", "d2d", "h2h"] {
        let out = ok(&["inspect", "--size", "64K", "--dir", dir, "--raw"]);
        let rows = inspect_rows(&out);
        assert_eq!(rows.len(), 2, "{dir}: one 64 KiB data pair and the marker\n{out}");
        assert!(rows[0].2.contains("WRITE_BARRIER") && rows[1].2.contains("marker"), "{dir}\n{out}");
    }
}

#[test]
fn memset_100k_exits_zero() {
    let out = ok(&["memset", "--size", "100K", "--value", "0x5a"]);
    assert!(out.contains("verified"), "{out}");
    assert!(out.contains("transfers"), "{out}");
}

#[test]
fn copy_d2h_1m_exits_zero() {
    let out = ok(&["copy", "--dir", "d2h", "--size", "1M"]);
    assert!(out.contains("verified byte-exact"), "{out}");
    assert!(out.contains("descriptors") && out.contains("GB/s"), "{out}");
}

#[test]
fn async_copy_stream_exits_zero_and_oversized_async_is_refused() {
    let out = ok(&["copy", "--dir", "h2d", "--size", "64K", "--async", "16"]);
    assert!(out.contains("16 async copies"), "{out}");
    // One batch holds 2031 × 64 KiB; 128 MiB is more: the op layer's -EINVAL.
    let o = ndma(&["copy", "--dir", "h2d", "--size", "128M", "--async", "1"]);
    assert_eq!(o.status.code(), Some(1), "a DMA error");
    assert!(stderr(&o).contains("too large") && stderr(&o).contains("errno -22"), "{}", stderr(&o));
}

#[test]
fn bad_instance_exits_non_zero_with_the_valid_names() {
    let o = ndma(&["--instance", "p4d.24xlarge", "inspect", "--size", "4K"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("p4d.24xlarge") && err.contains("trn1.2xlarge") && err.contains("trn2.48xlarge"), "{err}");
}

#[test]
fn bad_sizes_and_values_are_rejected_with_a_message() {
    for size in ["12X", "abc", "1.5M", "-4K", ""] {
        let o = ndma(&["inspect", &format!("--size={size}")]);
        assert!(!o.status.success(), "{size:?} accepted");
        assert!(stderr(&o).contains("invalid"), "{size:?}: {}", stderr(&o));
    }
    let o = ndma(&["memset", "--size", "4K", "--value", "300"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("0..=255"), "{}", stderr(&o));
}

#[test]
fn a_missing_nc_is_the_op_layers_einval() {
    let o = ndma(&["inspect", "--size", "4K", "--nc", "7"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("errno -22, EINVAL"), "{}", stderr(&o));
}

#[test]
fn quick_bench_writes_json_with_every_required_case() {
    let path: PathBuf = std::env::temp_dir().join(format!("ndma-bench-{}.json", std::process::id()));
    let path_s = path.to_str().expect("utf-8 temp path");
    let svg_path: PathBuf = std::env::temp_dir().join(format!("ndma-bench-{}.svg", std::process::id()));
    let svg_s = svg_path.to_str().expect("utf-8 temp path");
    let out = ok(&["bench", "--quick", "--json", path_s, "--plot", svg_s]);
    assert!(out.contains("roundtrip_4k"), "{out}");
    assert!(out.contains(&format!("plot written to {svg_s}")), "{out}");
    let text = std::fs::read_to_string(&path).expect("json written");
    let _ = std::fs::remove_file(&path);
    let svg = std::fs::read_to_string(&svg_path).expect("plot written");
    let _ = std::fs::remove_file(&svg_path);
    // The plot: a panel per direction, three curves in each (a marker per size), ticks at the sizes measured.
    let labels: Vec<&str> =
        svg.split("<text").skip(1).filter_map(|t| Some(t.split_once('>')?.1.split('<').next()?.trim())).collect();
    let count = |l: &str| labels.iter().filter(|&&x| x == l).count();
    assert_eq!(count("ndma bench: trn1.2xlarge (v2), marker timing"), 1, "{labels:?}");
    for panel in
        ["h2d sync (host→device)", "d2h sync (device→host)", "d2d sync (device→device)", "h2h sync (host→host)"]
    {
        assert_eq!(count(panel), 1, "{panel}: {labels:?}");
    }
    for label in
        ["ndma, best sample", "ndma, median sample", "memcpy, best sample", "4 KiB", "64 KiB", "1 MiB", "16 MiB"]
    {
        assert_eq!(count(label), 4, "{label}: {labels:?}");
    }
    assert_eq!(svg.matches("<circle").count(), 4 * 3 * 4, "4 panels × 3 curves × 4 sizes");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let cases = v["cases"].as_array().expect("cases array");
    let has = |name: &str, mode: &str, size: u64| {
        cases.iter().any(|c| c["name"] == name && c["mode"] == mode && c["size"] == size && c["arch"] == "v2")
    };
    // --quick skips the 256 MiB sizes.
    for name in ["h2d", "d2h", "d2d", "h2h"] {
        for size in [4096, 65536, 1 << 20, 16 << 20] {
            assert!(has(name, "sync", size), "missing sync {name} {size}\n{text}");
        }
    }
    for name in ["h2d", "d2h"] {
        for size in [65536, 1 << 20, 16 << 20] {
            assert!(has(name, "async", size), "missing async {name} {size}\n{text}");
        }
    }
    let throughput = |c: &&serde_json::Value| {
        let n = c["name"].as_str().unwrap_or("");
        ["h2d", "d2h", "d2d", "h2h", "pipelined_4k", "scale"].contains(&n)
            || n.ends_with("_zc")
            || n.ends_with("_bounce")
    };
    for c in cases.iter().filter(throughput) {
        for key in ["gbps", "gbps_median", "memcpy_gbps", "ratio"] {
            assert!(c[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {c}");
        }
        if c["mode"] == "async" && ["h2d", "d2h"].contains(&c["name"].as_str().unwrap_or("")) {
            assert!(c["sync_gbps"].as_f64().is_some(), "{c}");
        }
    }
    let rts: Vec<_> = cases.iter().filter(|c| c["name"] == "roundtrip_4k").collect();
    for (timing, assist) in [("marker", true), ("driver", true), ("marker", false), ("driver", false)] {
        let rt = rts
            .iter()
            .find(|c| c["timing"] == timing && c["assist"] == assist)
            .unwrap_or_else(|| panic!("no roundtrip_4k with {timing} timing, assist {assist}\n{text}"));
        assert_eq!(
            (rt["mode"].as_str(), rt["size"].as_u64(), rt["arch"].as_str()),
            (Some("sync"), Some(4096), Some("v2"))
        );
        assert_eq!(rt["first_wait_ns"].as_u64(), Some(1000), "V2: first wait of a 2-descriptor batch is 1 µs");
        for key in ["median_ns", "p99_ns", "pingpong_ns"] {
            assert!(rt[key].as_u64().is_some_and(|x| x > 0), "{key} in {rt}");
        }
    }
    for name in ["roundtrip_idle_2ms", "roundtrip_idle_50ms"] {
        let c = cases.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {name}"));
        assert!(c["median_ns"].as_u64().is_some() && c["p99_ns"].as_u64().is_some(), "{c}");
    }
    assert!(
        has("d2d", "sync", 4096)
            && cases.iter().any(|c| c["name"] == "d2d" && c["size"] == 4096 && c["median_ns"].is_u64())
    );
    let p = cases.iter().find(|c| c["name"] == "pipelined_4k").expect("pipelined_4k");
    assert!(p["ops_per_s"].as_f64().is_some_and(|x| x > 0.0) && p["memcpy_ops_per_s"].as_f64().is_some(), "{p}");
    // --quick: zero-copy rows at 64 KiB and 1 MiB, both layouts, every way and mode.
    for name in ["h2d_zc", "d2h_zc", "h2d_bounce", "d2h_bounce"] {
        let modes: &[&str] = if name.ends_with("_zc") { &["sync", "async", "prepinned"] } else { &["sync", "async"] };
        for mode in modes {
            for layout in ["contiguous", "scattered"] {
                for size in [65536u64, 1 << 20] {
                    assert!(
                        cases.iter().any(|c| c["name"] == name
                            && c["mode"] == *mode
                            && c["layout"] == layout
                            && c["size"] == size
                            && c["arch"] == "v3"),
                        "missing {name} {mode} {layout} {size}"
                    );
                }
            }
        }
    }
    // The CPU's own copy of the same user pages, each layout and size, beside memcpy.
    for layout in ["contiguous", "scattered"] {
        for size in [65536u64, 1 << 20] {
            assert!(
                cases.iter().any(|c| c["name"] == "user_copy"
                    && c["mode"] == "cpu"
                    && c["layout"] == layout
                    && c["size"] == size
                    && c["gbps"].as_f64().is_some_and(|g| g > 0.0)
                    && c["memcpy_gbps"].as_f64().is_some()),
                "missing user_copy {layout} {size}"
            );
        }
    }
    // The paired comparisons behind the zero-copy goals (--quick: the 1 MiB ones), each against sync contiguous.
    let pairs: Vec<(&str, &str)> = cases
        .iter()
        .filter(|c| c["name"] == "h2d_zc_pair")
        .map(|c| {
            assert_eq!(
                (c["size"].as_u64(), c["versus"].as_str(), c["arch"].as_str()),
                (Some(1 << 20), Some("sync contiguous"), Some("v3"))
            );
            for key in ["gbps", "gbps_median", "versus_gbps_median", "over_versus"] {
                assert!(c[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {c}");
            }
            let ratio = c["gbps_median"].as_f64().unwrap() / c["versus_gbps_median"].as_f64().unwrap();
            assert!((c["over_versus"].as_f64().unwrap() - ratio).abs() < 1e-9, "{c}");
            (c["mode"].as_str().unwrap_or(""), c["layout"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(pairs, [("sync", "scattered"), ("prepinned", "contiguous")]);
    let goals = v["goals"].as_array().expect("goals");
    for (goal, pair) in [("1 MiB scattered / contiguous", 0), ("1 MiB pre-pinned / pinning", 1)] {
        let g = goals.iter().find(|g| g["goal"].as_str().is_some_and(|s| s.contains(goal))).expect(goal);
        let c = cases.iter().filter(|c| c["name"] == "h2d_zc_pair").nth(pair).expect("pair");
        assert_eq!(g["value"], c["over_versus"], "the goal's value is the paired figure: {g}");
    }
    let rings: Vec<u64> = cases.iter().filter(|c| c["name"] == "scale").filter_map(|c| c["rings"].as_u64()).collect();
    assert_eq!(rings, [1, 2], "--quick scales over 1 and 2 rings");
    let idle = cases.iter().find(|c| c["name"] == "idle_cpu").expect("idle_cpu");
    assert!(idle["cpu_percent"].as_f64().is_some(), "{idle}");
    assert!(v["goals"].as_array().is_some_and(|g| !g.is_empty()), "goals");
    assert_eq!(v["timing"], "marker");
}

#[test]
fn faults_reset_window_on_v2_retries_and_verifies() {
    // The retry count is checked exactly against the other counters in `conventions.rs` (JSON).
    let out = ok(&["faults", "reset-window"]);
    assert!(out.contains("the batch replayed") && out.contains("data verified"), "{out}");
}

#[test]
fn faults_reset_window_on_v3_never_retries() {
    let out = ok(&["--instance", "trn2.48xlarge", "faults", "reset-window"]);
    assert!(out.contains("V3: no retry"), "{out}");
    assert!(out.contains("retries 0"), "{out}");
}

#[test]
fn faults_hang_times_out_without_retry_and_recovers() {
    let out = ok(&["faults", "hang"]);
    assert!(out.contains("errno -110"), "{out}");
    assert!(out.contains("retries 0"), "{out}");
    assert!(out.contains("the next copy on the device succeeded"), "{out}");
}

#[test]
fn trace_writes_a_timeline_of_the_op_layer_and_the_engine() {
    let path = std::env::temp_dir().join(format!("ndma-trace-test-{}.json", std::process::id()));
    let path_s = path.to_str().expect("utf-8 temp path");
    let out = ok(&["trace", "--size", "200000", "--out", path_s]);
    assert!(out.contains("verified"), "{out}");
    let text = std::fs::read_to_string(&path).expect("trace written");
    let _ = std::fs::remove_file(&path);
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let names: Vec<&str> =
        json["traceEvents"].as_array().expect("events").iter().filter_map(|e| e["name"].as_str()).collect();
    for want in ["memcpy", "stage_batch", "wait_for_completion", "execute", "doorbell RX (S2M)", "doorbell TX (M2S)"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let executes = json["traceEvents"].as_array().unwrap().iter().filter(|e| e["name"] == "execute").count();
    assert_eq!(executes, 1, "one batch of 4 data pairs + marker");
}
