//! The zero-copy commands end to end: `ndma zerocopy`, `ndma inspect --zerocopy`, the `zc-*` scenarios of
//! `ndma faults` and the zero-copy rows of `ndma demo`. Each parses the `--json` document and checks its fields
//! exactly: counts derived from the piece-sizing and coalescing rules, completions in order, pin activity, the
//! leak check, and that every key is documented in the command's help and the README.
//!
//! No wall-clock thresholds: exit codes and parsed JSON only.

use std::process::{Command, Output};

use serde_json::{json, Value};

mod support;

const PAGE: u64 = 4096;
/// The V3 preset (async zero-copy).
const V3: &str = "trn2.48xlarge";

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ndma")).args(args).env("RUST_LOG", "off").output().expect("run ndma")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `ndma ARGS --json -`, which must succeed: stdout is exactly one JSON document.
fn json_of(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--json", "-"]);
    let o = run(&all);
    assert!(o.status.success(), "ndma {all:?}: {:?}\n{}\n{}", o.status, text(&o.stdout), text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("ndma {all:?}: not JSON ({e}):\n{}", text(&o.stdout)))
}

/// The exit code and stderr of a command that must fail.
fn fails(args: &[&str]) -> (Option<i32>, String) {
    let o = run(args);
    assert!(!o.status.success(), "ndma {args:?} succeeded:\n{}", text(&o.stdout));
    (o.status.code(), text(&o.stderr))
}

/// Every key of `doc` is in `ndma COMMAND --help` and in the README's row for the command (or its paragraph on
/// counters and zero-copy objects).
fn documented(command: &str, doc: &Value) {
    support::documented(command, &text(&run(&[command, "--help"]).stdout), doc);
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an unsigned number: {v}"))
}

fn cqe(seq: u64, ret: i64) -> Value {
    json!({"sequence_num": seq, "compl_ret": ret, "context": 0xc0de_0000_0000u64 | seq})
}

fn clean_leak_check() -> Value {
    json!({
        "pinned_frames": 0, "pins": 0, "orphaned_frames": 0, "bad_unpins": 0, "pinned_ranges": 0, "contexts": 0,
        "queue_pinned_pages": 0, "backlog": 0, "ring_slots_used": 0, "ring_slots_accounted": 0, "clean": true
    })
}

fn pins(fast: u64, slow: u64, remote: u64, short: u64, failed: u64, pinned: u64, dirty: u64) -> Value {
    json!({
        "fast_calls": fast, "slow_calls": slow, "remote_calls": remote, "short_pins": short, "failed_calls": failed,
        "pinned_pages": pinned, "unpinned_pages": pinned, "dirty_unpins": dirty
    })
}

#[test]
fn a_sync_scattered_transfer_on_v2_counts_every_piece_run_and_pin() {
    let v = json_of(&["zerocopy", "--dir", "h2d", "--size", "1M", "--layout", "scattered", "--offset", "100"]);
    documented("zerocopy", &v);
    let fixed = [
        ("instance", json!("trn1.2xlarge")),
        ("arch", json!("v2")),
        ("override", json!(true)),
        ("dir", json!("h2d")),
        ("mode", json!("sync")),
        ("prepinned", json!(false)),
        ("layout", json!("scattered")),
        ("size", json!(1 << 20)),
        ("offset", json!(100)),
        ("requests", json!(1)),
        ("ops", json!(1)),
        ("guard_bytes", json!(PAGE)),
        ("verified", json!(true)),
        // 1 MiB + 100 at page offset 100: pieces of 256 KiB - 100, 3 × 256 KiB, then 100 bytes (FACTS §5.4);
        // 257 pages, each its own run (scattered), each run one descriptor; one marker and 2 doorbells a piece.
        ("pieces", json!(5)),
        ("runs", json!(257)),
        ("data_descriptors", json!(257)),
        ("descriptors", json!(262)),
        ("doorbells", json!(10)),
        ("pins", pins(5, 0, 0, 0, 0, 257, 0)),
        ("cqes", json!([])),
        ("leak_check", clean_leak_check()),
    ];
    for (k, want) in fixed {
        assert_eq!(v[k], want, "{k} in {v}");
    }
    assert_eq!((u(&v["counters"]["batches"]), u(&v["counters"]["timeouts"])), (5, 0), "{v}");
    assert_eq!(u(&v["user_va"]) % PAGE, 100);
    assert!(v.get("prepin").is_none(), "{v}");
}

#[test]
fn async_requests_on_v3_complete_once_each_in_order_and_unpin_dirty() {
    let args = ["--instance", V3, "zerocopy", "--dir", "d2h", "--size", "300000", "--layout", "runs:3"];
    let v = json_of(&[&args[..], &["--offset", "4095", "--async", "--requests", "3", "--ops", "2"]].concat());
    documented("zerocopy", &v);
    assert_eq!(
        (v["arch"].as_str(), v["override"].as_bool(), v["mode"].as_str()),
        (Some("v3"), Some(false), Some("async"))
    );
    assert_eq!(v["cqes"], json!([cqe(1, 0), cqe(2, 0), cqe(3, 0)]));
    // Six ops of 50000 bytes, each one piece (under 256 KiB with its page offset).
    assert_eq!(u(&v["pieces"]), 6);
    // Runs of 3 frames are 12 KiB: one descriptor each.
    assert_eq!(u(&v["data_descriptors"]), u(&v["runs"]));
    assert_eq!(u(&v["descriptors"]), u(&v["runs"]) + 6);
    assert_eq!(u(&v["doorbells"]), 12);
    let pages: u64 = (0..6u64)
        .map(|i| {
            let off = (4095 + 50_000 * i) % PAGE;
            (off + 50_000).div_ceil(PAGE)
        })
        .sum();
    assert_eq!(v["pins"], pins(6, 0, 0, 0, 0, pages, pages), "device→host pages are unpinned dirty");
    assert_eq!(v["leak_check"], clean_leak_check());
}

/// More pieces than a context queue holds (2 requests × 1000 one-piece ops > 1023), and more requests than
/// the completion queue and its backlog hold together (2100 > 2 × 1024): the command keeps its completion
/// queue drained and submits a request only when the context queue can take all of it, so no request is
/// refused halfway (which the op layer drains and fences, and which the plan's counts used to call a
/// verification failure, exit 3) and no submit meets a full backlog (-EBUSY, exit 1).
#[test]
fn async_requests_beyond_the_context_and_completion_queues_complete_exactly_as_planned() {
    let v = json_of(
        &["--instance", V3, "zerocopy", "--dir", "h2d", "--size", "4M", "--requests", "2", "--ops", "1000"]
            .iter()
            .chain(&["--async"])
            .copied()
            .collect::<Vec<_>>(),
    );
    assert_eq!(v["cqes"], json!([cqe(1, 0), cqe(2, 0)]));
    assert_eq!((u(&v["pieces"]), u(&v["doorbells"])), (2000, 4000), "each piece issued once");
    assert_eq!(v["leak_check"], clean_leak_check());
    let v = json_of(&["--instance", V3, "zerocopy", "--dir", "d2h", "--size", "2100", "--requests", "2100", "--async"]);
    let cqes = v["cqes"].as_array().expect("cqes");
    assert_eq!(cqes.len(), 2100);
    assert!(cqes.iter().zip(1..).all(|(c, seq)| *c == cqe(seq, 0)), "one completion each, in order");
    assert_eq!(u(&v["pieces"]), 2100);
    assert_eq!(v["leak_check"], clean_leak_check());
}

/// A request refused halfway (1100 pieces, a context queue holds 1023) is drained: its queued pieces are
/// waited for, then a fence makes their device writes land. The fence's wait was budgeted for its lone marker
/// (V3: nothing past the 1 µs first wait) rather than for the 64 MiB of writes it fences, and timed out — a
/// timeout nobody injected, logged as an error, with a ring re-initialisation. The refusal alone is expected.
#[test]
fn a_request_refused_halfway_is_drained_without_a_timeout() {
    let args = ["--instance", V3, "zerocopy", "--dir", "h2d", "--async", "--size", "64M", "--ops", "1100"];
    // The default log level: the op layer logs a timeout and a ring re-initialisation as it meets them.
    let o = Command::new(env!("CARGO_BIN_EXE_ndma")).args(args).env_remove("RUST_LOG").output().expect("run ndma");
    let (code, err) = (o.status.code(), text(&o.stderr));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("context queue of NeuronCore 0 is full (errno -16, EBUSY)"), "{err}");
    assert!(!err.contains("timed out") && !err.contains("re-initialised"), "{err}");
}

#[test]
fn pre_pinned_transfers_pin_nothing() {
    let v = json_of(&["--instance", V3, "zerocopy", "--dir", "h2d", "--size", "1M", "--prepinned", "--requests", "2"]);
    documented("zerocopy", &v);
    assert_eq!(v["pins"], pins(0, 0, 0, 0, 0, 0, 0), "{v}");
    let pre = &v["prepin"];
    assert_eq!((u(&pre["fast_calls"]), u(&pre["pinned_pages"]), u(&pre["unpinned_pages"])), (1, 256, 0), "{v}");
    assert!(pre["contiguous_pa"].as_u64().is_some(), "a contiguous range has a device address: {v}");
    // Two requests of 512 KiB: two pieces of 256 KiB each, one run of four 64 KiB descriptors per piece.
    assert_eq!((u(&v["pieces"]), u(&v["runs"]), u(&v["descriptors"])), (4, 4, 20), "{v}");
    assert_eq!(v["leak_check"], clean_leak_check(), "the range was unpinned before the leak check");
}

#[test]
fn async_zero_copy_on_v2_is_the_op_layers_einval_and_bad_arguments_are_usage_errors() {
    let (code, err) = fails(&["zerocopy", "--dir", "h2d", "--size", "64K", "--async"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("async zero-copy") && err.contains("(errno -22, EINVAL)"), "{err}");
    for args in [
        &["zerocopy", "--dir", "h2d", "--size", "4K", "--ops", "0"][..],
        &["zerocopy", "--dir", "h2d", "--size", "4", "--requests", "5"],
        &["zerocopy", "--dir", "h2d", "--size", "4K", "--layout", "runs:0"],
        &["zerocopy", "--dir", "d2d", "--size", "4K"],
    ] {
        assert_eq!(fails(args).0, Some(2), "{args:?}");
    }
}

/// `ndma inspect --zerocopy` of 20000 bytes at page offset 100 of a buffer in runs of 4 frames: the window's
/// five pages are the last three frames of one run and the first two of the next, so two runs of 12188 and 7812
/// bytes, one descriptor each, then the marker.
fn check_piece(a: &Value, to_device: bool) {
    let frames: Vec<u64> = a["frames"].as_array().expect("frames").iter().map(u).collect();
    assert_eq!(frames.len(), 5, "{a}");
    let runs = a["runs"].as_array().expect("runs");
    let got: Vec<(u64, u64, u64, Value)> =
        runs.iter().map(|r| (u(&r["index"]), u(&r["frames"]), u(&r["bytes"]), r["descriptors"].clone())).collect();
    assert_eq!(got, [(0, 3, 12188, json!([0])), (1, 2, 7812, json!([1]))], "{a}");
    assert_eq!((u(&runs[0]["first_frame"]), u(&runs[1]["first_frame"])), (frames[0], frames[3]));
    assert_eq!(u(&runs[0]["start"]) % PAGE, 100, "the first run starts at the page offset");
    let d = a["descriptors"].as_array().expect("descriptors");
    let shape: Vec<(u64, &str, u64)> =
        d.iter().map(|x| (u(&x["index"]), x["kind"].as_str().expect("kind"), u(&x["len"]))).collect();
    assert_eq!(shape, [(0, "data", 12188), (1, "data", 7812), (2, "marker", 4)], "{a}");
    let (host, dev) = if to_device { ("src", "dst") } else { ("dst", "src") };
    for (i, x) in d[..2].iter().enumerate() {
        assert_eq!(x["run"], json!(i), "{x}");
        assert_eq!(x[host], runs[i]["start"], "{x}");
        assert_eq!(u(&x[dev]), u(&a["device_pa"]) + if i == 0 { 0 } else { 12188 }, "{x}");
        assert_eq!(
            (x[&format!("{host}_mem")].as_str(), x[&format!("{dev}_mem")].as_str()),
            (Some("host"), Some("hbm"))
        );
        assert_eq!(x["tx_words"][2], x["src"], "{x}");
        assert_eq!(x["rx_words"][2], x["dst"], "{x}");
    }
    assert!(d[2].get("run").is_none());
    assert_eq!(u(&d[2]["dst"]), u(&d[2]["src"]) + 4, "the marker copies +0 → +4");
    let barriers: Vec<&str> = d.iter().map(|x| x["barrier"].as_str().expect("barrier")).collect();
    let want = match (to_device, a["arch"].as_str()) {
        (true, Some("v2")) => ["none", "write_barrier", "none"],
        (true, _) => ["none", "none", "sow"],
        (false, _) => ["none", "none", "none"],
    };
    assert_eq!(barriers, want, "{a}");
    assert_eq!(a["marker_barrier"], json!(want[2]));
    let sow = d[2]["rx_flags"].as_array().expect("rx_flags").contains(&json!("SOW"));
    assert_eq!(sow, want[2] == "sow", "{a}");
    assert_eq!((a["plan_matches"].as_bool(), a["verified"].as_bool()), (Some(true), Some(true)));
    assert_eq!((u(&a["counters"]["descriptors"]), u(&a["counters"]["doorbells"])), (3, 2));
    assert_eq!(a["leak_check"], clean_leak_check());
}

#[test]
fn inspect_zerocopy_shows_v2_and_v3_side_by_side_and_the_barrier_differs() {
    let args = ["inspect", "--zerocopy", "--size", "20000", "--offset", "100", "--layout", "runs:4"];
    let v = json_of(&args);
    documented("inspect", &v);
    assert_eq!(
        (v["mode"].as_str(), v["dir"].as_str(), u(&v["size"]), u(&v["offset"]), v["layout"].as_str()),
        (Some("zerocopy"), Some("h2d"), 20000, 100, Some("runs:4"))
    );
    let archs = v["archs"].as_array().expect("archs");
    let who: Vec<(&str, &str, bool)> = archs
        .iter()
        .map(|a| (a["instance"].as_str().unwrap(), a["arch"].as_str().unwrap(), a["override"].as_bool().unwrap()))
        .collect();
    assert_eq!(who, [("trn1.2xlarge", "v2", true), (V3, "v3", false)]);
    for a in archs {
        check_piece(a, true);
    }
    let out = text(&run(&args).stdout);
    assert!(out.contains("v2 barrier") && out.contains("write_barrier") && out.contains("sow"), "{out}");
}

#[test]
fn inspect_zerocopy_of_a_read_on_one_instance_has_no_barrier() {
    let v = json_of(&["--instance", V3, "inspect", "--zerocopy", "--dir", "d2h", "--size", "20000", "--offset", "100"]);
    let archs = v["archs"].as_array().expect("archs");
    assert_eq!(archs.len(), 1, "only the --instance given");
    assert_eq!(archs[0]["arch"], "v3");
    check_piece(&archs[0], false);
    for args in [
        &["inspect", "--zerocopy", "--size", "256K", "--offset", "1"][..],
        &["inspect", "--zerocopy", "--size", "0"],
        &["inspect", "--zerocopy", "--size", "4K", "--dir", "d2d"],
        &["inspect", "--size", "4K", "--layout", "scattered"],
    ] {
        assert_eq!(fails(args).0, Some(2), "{args:?}");
    }
}

fn steps(v: &Value) -> Vec<(String, bool, Option<i64>, bool)> {
    v["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            let name = s["name"].as_str().expect("name").to_string();
            (name, s["ok"].as_bool().expect("ok"), s["errno"].as_i64(), s["verified"].as_bool().expect("verified"))
        })
        .collect()
}

#[test]
fn faults_zc_hole_fails_with_enomem_at_the_hole_and_the_next_request_succeeds() {
    let v = json_of(&["faults", "zc-hole"]);
    documented("faults", &v);
    assert_eq!((v["scenario"].as_str(), v["override"].as_bool()), (Some("zc-hole"), Some(true)));
    let s = steps(&v);
    assert_eq!(
        s.iter().map(|(_, ok, errno, verified)| (*ok, *errno, *verified)).collect::<Vec<_>>(),
        [(false, Some(-12), true), (true, None, true)],
        "{v}"
    );
    let hole = ndma_emu::user::USER_VA_BASE + PAGE + 100 * PAGE;
    let err = v["steps"][0]["error"].as_str().expect("error");
    assert!(err.contains(&format!("{hole:#x}")), "the failing page is the hole: {err}");
    // 200 pages in pieces of 64: piece 1 pins; piece 2's fast pin stops short at the hole (36 pages), is given
    // back, and so is the slow path's. Then 100 pages in two pieces of 50 (FACTS §5.4).
    assert_eq!(v["pins"], pins(4, 1, 0, 2, 0, 64 + 36 + 36 + 100, 0));
    assert_eq!(v["leak_check"], clean_leak_check());
    assert!(v.get("cqes").is_none(), "a sync scenario takes no completions");
    assert_eq!(u(&v["copy_bytes"]), 200 * PAGE);
}

#[test]
fn faults_zc_pin_fail_completes_the_request_with_the_remote_pins_errno() {
    let v = json_of(&["--instance", V3, "faults", "zc-pin-fail"]);
    documented("faults", &v);
    assert_eq!(v["cqes"], json!([cqe(1, -12), cqe(2, 0)]));
    assert_eq!(v["pins"], pins(2, 1, 1, 0, 1, 128, 0), "one remote pin, the failing one");
    assert_eq!(steps(&v).iter().map(|s| (s.1, s.3)).collect::<Vec<_>>(), [(true, false), (true, true)]);
    assert_eq!(v["leak_check"], clean_leak_check());
}

#[test]
fn faults_zc_hang_fails_the_hung_request_and_the_rest_complete() {
    let v = json_of(&["--instance", V3, "faults", "zc-hang"]);
    documented("faults", &v);
    assert_eq!(v["cqes"], json!([cqe(1, -110), cqe(2, 0), cqe(3, 0)]));
    let s = steps(&v);
    assert_eq!(s.len(), 4, "{v}");
    assert!(s.iter().all(|(_, ok, _, _)| *ok), "every submit is accepted: {v}");
    assert!(s[3].3, "the request after the hang is verified");
    assert_eq!(v["leak_check"], clean_leak_check());
}

#[test]
fn faults_zc_exit_completes_every_request_with_esrch() {
    let v = json_of(&["--instance", V3, "faults", "zc-exit"]);
    documented("faults", &v);
    assert_eq!(v["cqes"], json!([cqe(1, -3), cqe(2, -3), cqe(3, -3)]));
    assert_eq!(v["pins"], pins(0, 3, 3, 0, 3, 0, 0), "three remote pins, all refused");
    let s = steps(&v);
    assert_eq!(s.len(), 4);
    assert!(s[3].1 && s[3].3, "another process's request succeeds: {v}");
    assert_eq!(v["leak_check"], clean_leak_check());
}

#[test]
fn faults_zc_cq_full_backlogs_then_delivers_every_completion_in_order() {
    let v = json_of(&["--instance", V3, "faults", "zc-cq-full"]);
    documented("faults", &v);
    let b = &v["cq_backlog"];
    assert_eq!((u(&b["requests"]), u(&b["posted"]), u(&b["backlog"])), (2048, 1024, 1024), "{b}");
    assert_eq!(b["refused_errno"], json!(-16), "one more request is refused -EBUSY: {b}");
    let want: Vec<Value> = (1..=2048).map(|s| cqe(s, 0)).collect();
    assert_eq!(v["cqes"], json!(want));
    assert_eq!(v["pins"], pins(2048, 0, 0, 0, 0, 2048, 0));
    assert_eq!(v["leak_check"], clean_leak_check());
}

#[test]
fn async_fault_scenarios_need_v3() {
    for s in ["zc-pin-fail", "zc-hang", "zc-exit", "zc-cq-full"] {
        let (code, err) = fails(&["faults", s]);
        assert_eq!(code, Some(2), "{s}: {err}");
        assert!(err.contains(V3), "{s}: {err}");
    }
}

#[test]
fn demo_has_verified_zero_copy_rows() {
    let v = json_of(&["demo", "--quick"]);
    assert_eq!(v["zerocopy_override"], true, "V2");
    let zc: Vec<&Value> = v["cases"].as_array().expect("cases").iter().filter(|c| c.get("layout").is_some()).collect();
    let names: Vec<(&str, u64)> = zc.iter().map(|c| (c["operation"].as_str().unwrap(), u(&c["size"]))).collect();
    assert_eq!(names, [("h2d_zc", 1 << 20), ("d2h_zc", 1 << 20)]);
    for c in zc {
        assert_eq!((c["layout"].as_str(), c["verified"].as_bool()), (Some("scattered"), Some(true)), "{c}");
        // 1 MiB in 4 pieces of 64 scattered pages: 64 descriptors + a marker each.
        assert_eq!((c["batches_per_op"].as_f64(), c["descriptors_per_op"].as_f64()), (Some(4.0), Some(260.0)), "{c}");
        assert!(c["ratio"].as_f64().is_some_and(|r| r > 0.0), "{c}");
    }
}
