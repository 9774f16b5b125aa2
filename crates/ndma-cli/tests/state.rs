//! `ndma inspect --state` and the ring states `ndma faults` shows (issue 11 §1): the JSON parsed and its fields
//! matched, every key documented in the command's help and in the README.

use std::process::{Command, Output};

use serde_json::Value;

mod support;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ndma")).args(args).env_remove("RUST_LOG").output().expect("run ndma")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(o.status.success(), "ndma {args:?}: {:?}\n{}\n{}", o.status, text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

/// `ndma ARGS --json -`, parsed.
fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--json", "-"]);
    let out = ok(&all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ndma {all:?}: not JSON ({e}):\n{out}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn inspect_state_json_shows_the_async_copy_in_flight_on_every_ring() {
    let v = json(&["inspect", "--state"]);
    support::documented("inspect", &ok(&["inspect", "--help"]), &v);
    assert_eq!(
        (v["command"].as_str(), v["mode"].as_str(), v["arch"].as_str()),
        (Some("inspect"), Some("state"), Some("v2"))
    );
    assert_eq!((u(&v["nc"]), u(&v["size"])), (0, 200_000));
    assert_eq!(v["scenario"].as_array().unwrap().len(), 3);
    let rings = v["rings"].as_array().unwrap();
    assert_eq!(rings.len(), 2, "trn1.2xlarge: two NeuronCores, one H2T ring each");
    let r = &rings[0];
    assert_eq!((u(&r["nc"]), u(&r["engine"]), u(&r["queue"])), (0, 32, 0));
    // Two sync copies of 5 pairs each, acked; the async copy's 5 pairs staged and pending on the engine.
    for q in [&r["tx"], &r["rx"]] {
        assert_eq!((u(&q["next_desc_idx"]), u(&q["next_cdesc_idx"]), u(&q["ring_id"])), (15, 10, 1), "{q}");
        let regs = &q["regs"];
        assert_eq!((u(&regs["head"]), u(&regs["tail"]), u(&regs["ring_len"])), (10, 15, 8192), "{regs}");
        assert_eq!((regs["enabled"].as_bool(), regs["engine_state"].as_str()), (Some(true), Some("normal")));
    }
    let ctx = &r["contexts"];
    assert_eq!(ctx[1]["handle"], "async1");
    assert_eq!((ctx[1]["inuse"].as_bool(), u(&ctx[1]["in_flight"]), u(&ctx[1]["size"])), (Some(true), 5, 200_000));
    assert_eq!((ctx[0]["inuse"].as_bool(), ctx[1]["marker_seen"].as_bool()), (Some(false), Some(false)));
    let roles: Vec<(u64, &str)> =
        r["descriptors"].as_array().unwrap().iter().map(|d| (u(&d["slot"]), d["role"].as_str().unwrap())).collect();
    assert_eq!(
        roles,
        [
            (7, "free"),
            (8, "free"),
            (9, "free"),
            (10, "head"),
            (11, "pending"),
            (12, "pending"),
            (13, "pending"),
            (14, "pending")
        ]
    );
    let marker = &r["descriptors"][7];
    assert_eq!((u(&marker["tx"]["len"]), u(&marker["rx"]["addr"])), (4, u(&marker["tx"]["addr"]) + 4));
    assert_eq!(marker["tx"]["flags"], serde_json::json!(["FIRST", "LAST"]));
    assert_eq!(u(&r["descriptors"][6]["tx"]["len"]), 3392, "the async copy's last data pair");
    assert_eq!((u(&r["counters"]["transfers"]), u(&r["counters"]["descriptors"])), (2, 15));
    assert!(r.get("device_diagnostics").is_none(), "nothing went wrong: {r}");
    let idle = &rings[1];
    assert_eq!((u(&idle["engine"]), u(&idle["tx"]["next_desc_idx"]), u(&idle["counters"]["transfers"])), (33, 0, 0));
}

#[test]
fn inspect_state_prints_the_dump_and_size_is_optional_only_with_state() {
    let out = ok(&["inspect", "--state", "--size", "4K", "--dir", "d2h"]);
    for needle in [
        "d2h copy of 4096 bytes, verified",
        "next desc 6, next completion 4",
        "head 4 (ring id 1), tail 6 (ring id 1)",
        "HEAD    TX src",
        "NC 1: engine 33 queue 0: never used",
    ] {
        assert!(out.contains(needle), "{needle:?} missing:\n{out}");
    }
    assert_eq!(run(&["inspect"]).status.code(), Some(2), "--size is required without --state");
    assert_eq!(run(&["inspect", "--state", "--zerocopy", "--size", "4K"]).status.code(), Some(2));
}

#[test]
fn faults_hang_json_carries_the_ring_state_of_the_timeout() {
    let v = json(&["faults", "hang"]);
    support::documented("faults", &ok(&["faults", "--help"]), &v);
    let steps = v["steps"].as_array().unwrap();
    let (hung, next) = (&steps[0], &steps[1]);
    assert_eq!((hung["ok"].as_bool(), hung["errno"].as_i64()), (Some(false), Some(-110)));
    let s = &hung["state"];
    assert_eq!((u(&s["engine"]), u(&s["queue"])), (32, 0));
    assert_eq!((u(&s["tx"]["next_desc_idx"]), u(&s["tx"]["next_cdesc_idx"])), (5, 0), "before recovery: {s}");
    assert_eq!((u(&s["tx"]["regs"]["head"]), u(&s["tx"]["regs"]["tail"])), (0, 5));
    assert_eq!((u(&s["counters"]["timeouts"]), u(&s["counters"]["ring_resets"])), (1, 0));
    let head: Vec<&Value> = s["descriptors"].as_array().unwrap().iter().filter(|d| d["role"] == "head").collect();
    assert_eq!((head.len(), u(&head[0]["slot"]), u(&head[0]["tx"]["len"])), (1, 0, 65536));
    let d = s["device_diagnostics"].as_str().expect("the model's record");
    assert!(d.starts_with("engine 32 queue 0: hung by the fault plan; at M2S slot 0, S2M slot 0"), "{d}");
    assert!(next.get("state").is_none() && next["ok"].as_bool() == Some(true));
}

#[test]
fn faults_zc_hang_reports_the_devices_last_failure() {
    let v = json(&["--instance", "trn2.48xlarge", "faults", "zc-hang"]);
    support::documented("faults", &ok(&["faults", "--help"]), &v);
    let s = &v["last_failure"];
    assert!(s["zero_copy"].is_object(), "{s}");
    assert!(s["device_diagnostics"].as_str().unwrap().contains("hung by the fault plan"), "{s}");
    assert_eq!(u(&s["tx"]["regs"]["head"]), u(&s["tx"]["next_cdesc_idx"]), "hung at the oldest unacked slot: {s}");
}
