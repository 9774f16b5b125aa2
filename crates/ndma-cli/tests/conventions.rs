//! The conventions every `ndma` command follows: `--json` documents that parse and match the schema in the
//! command's help, exit codes per failure class, `-q`/`-v` and `RUST_LOG`, colour only on a terminal and never
//! with `NO_COLOR`, and completions and man pages generated from the command definition.
//!
//! No wall-clock thresholds: exit codes, parsed JSON, and the bytes written.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Output, Stdio};

use ndma_cli::cli::{testbed, BedOpts};
use ndma_cli::error::CliError;
use ndma_emu::test_utils::{fill_chunk, write_chunk, Dir, Window, GUARD};
use ndma_emu::ExecPolicy;
use serde_json::Value;

mod support;

fn ndma_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ndma"));
    c.args(args).env_remove("RUST_LOG").env_remove("NO_COLOR");
    c
}

fn run(args: &[&str]) -> Output {
    ndma_cmd(args).output().expect("run ndma")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(args: &[&str]) -> Output {
    let o = run(args);
    assert!(o.status.success(), "ndma {args:?}: {:?}\n{}\n{}", o.status, text(&o.stdout), text(&o.stderr));
    o
}

/// `ndma ARGS --json -`: stdout is exactly one JSON document.
fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--json", "-"]);
    let o = ok(&all);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("ndma {all:?}: stdout is not JSON ({e}):\n{}", text(&o.stdout)))
}

/// Every key of `doc` is documented in `ndma COMMAND --help` and in the README's schema table, and `command`
/// names the command.
fn schema_documents(command: &str, doc: &Value) {
    support::documented(command, &text(&ok(&[command, "--help"]).stdout), doc);
}

#[test]
fn the_readme_lists_every_exit_code() {
    for c in ndma_cli::error::ExitCode::ALL {
        let row = format!("| {} | {} |", c.code(), c.name());
        assert!(support::README.contains(&row), "README lacks {row:?}");
    }
}

fn counters_of(v: &Value) -> [u64; 3] {
    let c = &v["counters"];
    [&c["transfers"], &c["descriptors"], &c["batches"]].map(|x| x.as_u64().unwrap_or_else(|| panic!("{v}")))
}

#[test]
fn copy_json_parses_and_is_documented() {
    let v = json(&["copy", "--dir", "d2h", "--size", "200000"]);
    schema_documents("copy", &v);
    assert_eq!((v["dir"].as_str(), v["mode"].as_str(), v["arch"].as_str()), (Some("d2h"), Some("sync"), Some("v2")));
    assert_eq!(
        (v["size"].as_u64(), v["copies"].as_u64(), v["total_bytes"].as_u64()),
        (Some(200_000), Some(1), Some(200_000))
    );
    // 200000 bytes = 3 × 64 KiB + 3392: four data pairs and the marker, one batch.
    assert_eq!(counters_of(&v), [1, 5, 1], "{v}");
    assert_eq!(v["counters"]["bytes"].as_u64(), Some(200_000));
    assert_eq!(v["engine"]["descriptors"].as_u64(), Some(5), "{v}");
    assert_eq!(v["verified"], true);
    assert!(v["elapsed_ns"].as_u64().is_some_and(|n| n > 0) && v["gbps"].as_f64().is_some(), "{v}");
}

#[test]
fn async_copy_json_counts_every_copy() {
    let v = json(&["copy", "--dir", "h2d", "--size", "64K", "--async", "8"]);
    assert_eq!(
        (v["mode"].as_str(), v["copies"].as_u64(), v["total_bytes"].as_u64()),
        (Some("async"), Some(8), Some(8 << 16))
    );
    assert_eq!(v["counters"]["transfers"].as_u64(), Some(8), "{v}");
    assert_eq!(v["counters"]["bytes"].as_u64(), Some(8 << 16), "{v}");
}

#[test]
fn memset_json_parses_and_is_documented() {
    let v = json(&["memset", "--size", "100K", "--value", "0x5a"]);
    schema_documents("memset", &v);
    assert_eq!(
        (v["size"].as_u64(), v["value"].as_u64(), v["guard_value"].as_u64()),
        (Some(102_400), Some(0x5a), Some(0xee))
    );
    assert_eq!((v["offset"].as_u64(), v["guard_bytes"].as_u64()), (Some(4096), Some(4096)));
    assert_eq!(v["verified"], true);
}

#[test]
fn inspect_json_has_every_pair_decoded() {
    let v = json(&["inspect", "--size", "200000"]);
    schema_documents("inspect", &v);
    let pairs = v["pairs"].as_array().expect("pairs");
    let kinds: Vec<&str> = pairs.iter().map(|p| p["kind"].as_str().expect("kind")).collect();
    assert_eq!(kinds, ["data", "data", "data", "data_last", "marker"]);
    let lens: Vec<u64> = pairs.iter().map(|p| p["len"].as_u64().expect("len")).collect();
    assert_eq!(lens, [65536, 65536, 65536, 3392, 4]);
    for (i, p) in pairs.iter().enumerate() {
        assert_eq!(p["index"].as_u64(), Some(i as u64));
        let tx: Vec<&str> = p["tx_flags"].as_array().expect("tx_flags").iter().filter_map(Value::as_str).collect();
        assert_eq!(tx.contains(&"WRITE_BARRIER"), i == 3, "only the batch's last data pair: {p}");
        assert!(tx.contains(&"FIRST") && tx.contains(&"LAST"), "{p}");
        // The raw words are the decoded fields: length field (0 = 64 KiB) and address.
        let w = p["tx_words"].as_array().expect("tx_words");
        assert_eq!(w[2], p["src"], "{p}");
        assert_eq!(w[0].as_u64().map(|x| x & 0xffff), Some(p["len"].as_u64().expect("len") % 65536), "{p}");
        assert_eq!(p["rx_words"][2], p["dst"], "{p}");
    }
    assert_eq!((pairs[0]["src_mem"].as_str(), pairs[0]["dst_mem"].as_str()), (Some("host"), Some("hbm")));
    assert_eq!(pairs[4]["dst"].as_u64(), pairs[4]["src"].as_u64().map(|a| a + 4), "the marker: +0 → +4");
    assert_eq!((v["data_pairs"].as_u64(), v["marker_pairs"].as_u64()), (Some(4), Some(1)));
    assert_eq!(v["write_barriers_ok"], true);
}

#[test]
fn faults_json_records_each_step() {
    let v = json(&["faults", "hang"]);
    schema_documents("faults", &v);
    let steps = v["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 2, "{v}");
    let (hung, next) = (&steps[0], &steps[1]);
    assert_eq!((hung["ok"].as_bool(), hung["errno"].as_i64()), (Some(false), Some(-110)), "{hung}");
    assert_eq!(hung["counters"]["timeouts"].as_u64(), Some(1));
    assert_eq!(hung["counters"]["retries"].as_u64(), Some(0));
    assert_eq!(hung["counters"]["ring_resets"].as_u64(), Some(1));
    assert_eq!((next["ok"].as_bool(), next["verified"].as_bool()), (Some(true), Some(true)), "{next}");
    assert!(next.get("error").is_none() && next.get("errno").is_none(), "{next}");
    assert_eq!(counters_of(next), [1, 5, 1]);
}

#[test]
fn faults_reset_window_json_shows_the_v2_retry() {
    let v = json(&["faults", "reset-window"]);
    let steps = v["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1, "{v}");
    let c = &steps[0]["counters"];
    let retries = c["retries"].as_u64().expect("retries");
    // Each retry follows one timeout, re-initialises the ring once and replays the one context.
    assert!(retries >= 1, "{v}");
    assert_eq!(
        (c["timeouts"].as_u64(), c["ring_resets"].as_u64(), c["replays"].as_u64()),
        (Some(retries), Some(retries), Some(retries)),
        "{v}"
    );
    assert_eq!(c["transfers"].as_u64(), Some(1), "{v}");
    assert_eq!((steps[0]["ok"].as_bool(), steps[0]["verified"].as_bool()), (Some(true), Some(true)));
    assert_eq!(v["retry_flag"], true);
}

#[test]
fn demo_json_parses_and_is_documented() {
    let v = json(&["demo", "--quick"]);
    schema_documents("demo", &v);
    let cases = v["cases"].as_array().expect("cases");
    let names: Vec<(&str, u64)> =
        cases.iter().map(|c| (c["operation"].as_str().expect("op"), c["size"].as_u64().expect("size"))).collect();
    let mut want = Vec::new();
    for op in ["h2d", "d2h", "d2d", "h2h"] {
        want.extend([(op, 4096), (op, 65536), (op, 1 << 20)]);
    }
    want.push(("memset", 1 << 20));
    // The zero-copy rows (checked in zerocopy.rs).
    want.extend([("h2d_zc", 1 << 20), ("d2h_zc", 1 << 20)]);
    assert_eq!(names, want);
    for c in cases {
        assert_eq!(c["verified"], true, "{c}");
        assert!(c["ratio"].as_f64().is_some_and(|r| r > 0.0), "{c}");
        // 4 KiB is one data pair + the marker per op; 1 MiB is 16 + 1 (one batch).
        match (c["operation"].as_str(), c["size"].as_u64()) {
            (Some("memset" | "h2d_zc" | "d2h_zc"), _) => {}
            (_, Some(4096)) => assert_eq!(c["descriptors_per_op"].as_f64(), Some(2.0), "{c}"),
            (_, Some(s)) if s == 1 << 20 => assert_eq!(c["descriptors_per_op"].as_f64(), Some(17.0), "{c}"),
            _ => {}
        }
    }
}

#[test]
fn bench_json_to_stdout_is_documented() {
    let v = json(&["bench", "--quick"]);
    schema_documents("bench", &v);
}

#[test]
fn a_json_file_leaves_the_human_report_on_stdout() {
    let path = std::env::temp_dir().join(format!("ndma-conv-{}.json", std::process::id()));
    let o = ok(&["memset", "--size", "4K", "--value", "7", "--json", path.to_str().expect("utf-8")]);
    let doc = std::fs::read_to_string(&path).expect("written");
    let _ = std::fs::remove_file(&path);
    let out = text(&o.stdout);
    assert!(out.contains("verified") && out.contains(&format!("wrote {}", path.display())), "{out}");
    let v: Value = serde_json::from_str(&doc).expect("JSON file");
    assert_eq!(v["value"].as_u64(), Some(7));
}

#[test]
fn exit_codes_per_failure_class() {
    let code = |args: &[&str]| run(args).status.code();
    assert_eq!(code(&["inspect", "--size", "4K"]), Some(0));
    // Usage (2): clap's refusals and the CLI's own.
    assert_eq!(code(&["inspect", "--size", "4X"]), Some(2));
    assert_eq!(code(&["no-such-command"]), Some(2));
    assert_eq!(code(&["-q", "-v", "inspect", "--size", "4K"]), Some(2));
    assert_eq!(code(&["--instance", "p4d.24xlarge", "inspect", "--size", "4K"]), Some(2));
    assert_eq!(code(&["copy", "--dir", "h2d", "--size", "4K", "--async", "0"]), Some(2));
    // `trace` refuses it the same way (it used to run nothing and report the untouched bytes as exit 3).
    let nowhere = std::env::temp_dir().join(format!("ndma-trace-async0-{}.json", std::process::id()));
    assert_eq!(code(&["trace", "--async", "0", "--out", nowhere.to_str().expect("utf-8")]), Some(2));
    assert!(!nowhere.exists(), "refused before any work");
    // Numbers the model cannot represent are refused, not overflowed (each was a panic, exit 101).
    for ms in ["0", "3600001", "18446744073709551615"] {
        assert_eq!(code(&["faults", "reset-window", "--reset-ms", ms]), Some(2), "--reset-ms {ms}");
    }
    let huge = ["inspect", "--zerocopy", "--size", "18446744073709551615", "--offset", "1"];
    let o = run(&huge);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--size must be 1 ..= 262143 bytes at page offset 1"), "{}", text(&o.stderr));
    // DMA error (1), with the errno in the message.
    let o = run(&["inspect", "--size", "4K", "--nc", "7"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("(errno -22, EINVAL)"), "{}", text(&o.stderr));
    // Output error (5).
    let o = run(&["inspect", "--size", "4K", "--json", "/nonexistent-ndma-dir/x.json"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("/nonexistent-ndma-dir/x.json"), "{}", text(&o.stderr));
}

/// A file a command cannot write is refused before any work: no report, exit 5 naming the file.
#[test]
fn an_unwritable_output_file_fails_before_the_run() {
    for args in [
        &["bench", "--quick", "--json", "/nonexistent-ndma-dir/b.json"][..],
        &["bench", "--quick", "--plot", "/nonexistent-ndma-dir/b.svg"],
        &["verify", "--count", "20", "--json", "/nonexistent-ndma-dir/v.json"],
        &["trace", "--size", "4K", "--out", "/nonexistent-ndma-dir/t.json"],
        &["copy", "--dir", "h2d", "--size", "4K", "--json", "/nonexistent-ndma-dir/c.json"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(5), "ndma {args:?}: {}", text(&o.stderr));
        let file = args.last().expect("path");
        assert!(text(&o.stderr).contains(&format!("cannot write {file}: ")), "ndma {args:?}: {}", text(&o.stderr));
        assert_eq!(text(&o.stdout), "", "ndma {args:?} ran before refusing its output file");
    }
}

/// Verification failures (3) and device errors (4) need a broken device, which no command line makes: the
/// CLI's own checks, run on a real window, produce the errors whose class `main` exits with.
#[test]
fn wrong_bytes_are_a_verification_failure_and_a_refused_back_door_a_device_error() {
    let opts = BedOpts {
        instance: ndma::Instance::TRN1_2XLARGE,
        // Inline engines: the copy completes before its wait starts; silicon budgets bound a lost one.
        emulation_budgets: false,
        timing: ndma_emu::WaitTiming::Marker,
    };
    let tb = testbed(opts, ExecPolicy::Inline).expect("testbed");
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, Dir::H2d, 8192, 0, 3).expect("window");
    w.copy(0, 8192).expect("copy");
    w.verify("clean", true).expect("the copy is right");
    fill_chunk(emu, &w.dst, GUARD + 100, 1, 0x42).expect("one wrong byte");
    let e = CliError::from(w.verify("tampered", true).expect_err("a wrong byte is found"));
    assert!(matches!(e, CliError::Verify(_)), "{e}");
    assert_eq!(e.exit_code(), 3);
    let e = CliError::from(write_chunk(emu, &w.dst, u64::MAX / 2, &[0]).expect_err("far outside HBM"));
    assert!(matches!(e, CliError::Emu { .. }), "{e}");
    assert_eq!(e.exit_code(), 4);
}

#[test]
fn quiet_and_verbose_set_the_log_level_and_rust_log_wins() {
    let stderr = |args: &[&str], rust_log: Option<&str>| {
        let mut c = ndma_cmd(args);
        if let Some(v) = rust_log {
            c.env("RUST_LOG", v);
        }
        let o = c.output().expect("run ndma");
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stderr)
    };
    // The hang scenario logs the timeout (ERROR) and the ring re-initialisation (WARN); building the testbed
    // is a DEBUG event.
    let default = stderr(&["faults", "hang"], None);
    assert!(default.contains("ERROR") && default.contains("WARN") && !default.contains("DEBUG"), "{default}");
    let quiet = stderr(&["-q", "faults", "hang"], None);
    assert!(quiet.contains("ERROR") && !quiet.contains("WARN"), "{quiet}");
    let debug = stderr(&["-vv", "faults", "hang"], None);
    assert!(debug.contains("DEBUG") && debug.contains("building testbed"), "{debug}");
    assert_eq!(stderr(&["-vv", "faults", "hang"], Some("off")), "", "RUST_LOG=off silences even -vv");
    let targeted = stderr(&["-q", "faults", "hang"], Some("ndma::classic=warn"));
    assert!(targeted.contains("WARN") && targeted.contains("ERROR"), "RUST_LOG adds to -q: {targeted}");
}

#[test]
fn piped_output_has_no_ansi_codes() {
    let o = ok(&["faults", "hang"]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(err.contains("ERROR"), "the log is there: {err}");
    assert!(!out.contains('\x1b') && !err.contains('\x1b'), "ANSI escape in piped output:\n{out}\n{err}");
}

/// Runs `ndma ARGS` with stderr on a fresh pseudo-terminal; returns what it wrote there.
fn stderr_on_a_terminal(args: &[&str], no_color: Option<&str>) -> String {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors into the provided ints; the name, termios and winsize pointers
    // may be null.
    let rc =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty succeeded, so both are open descriptors that nothing else owns.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut cmd = ndma_cmd(args);
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::from(slave)).spawn().expect("spawn ndma");
    // Our copy of the slave went into the Command, dropped here: once the child exits, the master reads EOF
    // (EIO on Linux).
    drop(cmd);
    let reader = std::thread::spawn(move || {
        let mut f = std::fs::File::from(master);
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match f.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf
    });
    let status = child.wait().expect("wait for ndma");
    assert!(status.success(), "{status:?}");
    text(&reader.join().expect("reader"))
}

#[test]
fn colour_on_a_terminal_unless_no_color() {
    let tty = stderr_on_a_terminal(&["faults", "hang"], None);
    assert!(tty.contains("ERROR") && tty.contains("\x1b["), "a terminal gets colour: {tty:?}");
    let plain = stderr_on_a_terminal(&["faults", "hang"], Some("1"));
    assert!(plain.contains("ERROR") && !plain.contains('\x1b'), "NO_COLOR: {plain:?}");
}

#[test]
fn completions_are_generated_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = text(&ok(&["completions", shell]).stdout);
        // Option names without their dashes: fish writes `-l json`.
        for word in ["inspect", "memset", "faults", "completions", "json", "emulation-budgets", "reset-window"] {
            assert!(script.contains(word), "{shell} completion lacks {word:?}");
        }
    }
    assert_eq!(run(&["completions", "tcsh"]).status.code(), Some(2));
}

#[test]
fn the_man_page_is_generated() {
    let page = text(&ok(&["man"]).stdout);
    assert!(page.contains(".TH ndma 1"), "{page}");
    for word in ["inspect", "completions", "Exit status", "NO_COLOR", "RUST_LOG"] {
        assert!(page.contains(word), "the man page lacks {word:?}");
    }
    let dir = std::env::temp_dir().join(format!("ndma-man-{}", std::process::id()));
    ok(&["man", "--out-dir", dir.to_str().expect("utf-8")]);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("man dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let copy_page = std::fs::read_to_string(dir.join("ndma-copy.1")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    for cmd in ["bench", "completions", "copy", "demo", "faults", "inspect", "man", "memset", "trace"] {
        assert!(files.contains(&format!("ndma-{cmd}.1")), "ndma-{cmd}.1 missing from {files:?}");
    }
    assert!(files.contains(&"ndma.1".to_string()), "{files:?}");
    assert!(copy_page.contains("elapsed_ns"), "the copy page carries its JSON schema");
}
