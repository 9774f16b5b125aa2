//! What the `ndma` command's test files share: the README they check the command against, and the check that
//! every key of a JSON document is documented.

#![allow(dead_code)] // Each test file uses its own part of this module.

use std::collections::BTreeSet;

use serde_json::Value;

/// The README, whose CLI section documents the JSON schemas and the exit codes.
pub const README: &str = include_str!("../../../../README.md");

/// Every object key anywhere in `v` (the keys of maps of counts too).
pub fn keys(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.insert(k.clone());
                keys(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| keys(x, out)),
        _ => {}
    }
}

/// The words of `s` that could be JSON keys.
pub fn words(s: &str) -> BTreeSet<&str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect()
}

/// The README's schema row of `command`.
pub fn schema_row(command: &str) -> &'static str {
    README
        .lines()
        .find(|l| l.starts_with(&format!("| `{command}` |")))
        .unwrap_or_else(|| panic!("no README schema row for {command}"))
}

/// Every key of `doc` (whose `command` must be `command`) is in `help` (`ndma COMMAND --help`) and in the
/// README's schema row for the command or in its paragraph on counters and zero-copy objects.
pub fn documented(command: &str, help: &str, doc: &Value) {
    assert_eq!(doc["command"], command, "{doc}");
    let row = schema_row(command);
    let objects = README.split("\n\n").find(|p| p.starts_with("Counters objects")).expect("README counters paragraph");
    let (in_help, in_row, in_objects) = (words(help), words(row), words(objects));
    let mut ks = BTreeSet::new();
    keys(doc, &mut ks);
    for k in ks {
        assert!(in_help.contains(k.as_str()), "`ndma {command} --help` does not document the JSON key {k:?}");
        assert!(
            in_row.contains(k.as_str()) || in_objects.contains(k.as_str()),
            "the README's {command} row lacks {k:?}"
        );
    }
}
