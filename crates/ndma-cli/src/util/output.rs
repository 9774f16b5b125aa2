//! Where a command's results go: the human report on stdout (the default) and, with `--json FILE`, one JSON
//! document per run. `--json -` puts the JSON on stdout *instead of* the human report, so stdout parses as
//! JSON whatever the command; diagnostics stay on stderr either way.

use std::fmt::Display;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;

use crate::error::{CliError, CliResult};

/// `--json FILE`, shared by every command that prints figures or counters.
#[derive(Debug, Clone, Default, Args)]
pub struct JsonArg {
    /// Also write the results as one JSON document to FILE; `-` writes it to stdout instead of the human
    /// report. The schema is under "JSON" below (`--help`) and in the README.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

impl JsonArg {
    /// Is the JSON going to stdout (so the human report must stay off it)?
    pub fn to_stdout(&self) -> bool {
        self.json.as_ref().is_some_and(|p| p.as_os_str() == "-")
    }

    /// The file the JSON goes to, if it goes to a file.
    pub fn file(&self) -> Option<&Path> {
        self.json.as_deref().filter(|_| !self.to_stdout())
    }

    /// The human report's sink for this run.
    pub fn out(&self) -> Out {
        Out { human: !self.to_stdout() }
    }

    /// Writes `doc` as pretty JSON to the chosen file or stdout (nothing without `--json`). Returns the file
    /// written, if any, so the human report can name it.
    ///
    /// # Errors
    ///
    /// [`CliError::Io`] when the document cannot be encoded or written.
    pub fn write<T: Serialize>(&self, doc: &T) -> CliResult<Option<PathBuf>> {
        let Some(path) = &self.json else { return Ok(None) };
        let text = serde_json::to_string_pretty(doc).map_err(|e| CliError::Io(format!("encoding the JSON: {e}")))?;
        if self.to_stdout() {
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{text}").map_err(|e| CliError::Io(format!("writing the JSON to stdout: {e}")))?;
            Ok(None)
        } else {
            std::fs::write(path, text + "\n").map_err(|e| CliError::Io(format!("writing {}: {e}", path.display())))?;
            Ok(Some(path.clone()))
        }
    }
}

/// Fails now when `path` cannot be written, so that a run of minutes does not end in "cannot write" with its
/// results lost. The file is opened for writing without truncating it (an existing file keeps its content
/// until the run writes it); one this check created is removed again.
///
/// # Errors
///
/// [`CliError::Io`] naming the file when it cannot be opened for writing.
pub fn check_writable(path: &Path) -> CliResult {
    let existed = path.exists();
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| CliError::Io(format!("cannot write {}: {e}", path.display())))?;
    if !existed {
        // Best effort: the run writes the file again at its end.
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// The human report: lines on stdout, or nowhere when stdout carries the JSON.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    human: bool,
}

impl Out {
    /// Prints one line.
    pub fn say(&self, line: impl Display) {
        if self.human {
            println!("{line}");
        }
    }

    /// Prints text that already ends in a newline (a rendered table).
    pub fn text(&self, text: &str) {
        if self.human {
            print!("{text}");
        }
    }

    /// Names the JSON file just written, if one was.
    pub fn wrote(&self, path: Option<PathBuf>) {
        if let Some(p) = path {
            self.say(format_args!("wrote {}", p.display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dash_means_stdout_and_silences_the_human_report() {
        let dash = JsonArg { json: Some("-".into()) };
        assert!(dash.to_stdout() && !dash.out().human);
        let file = JsonArg { json: Some("out.json".into()) };
        assert!(!file.to_stdout() && file.out().human);
        assert!(JsonArg::default().out().human);
    }

    #[test]
    fn without_json_nothing_is_written() {
        assert_eq!(JsonArg::default().write(&serde_json::json!({"a": 1})).ok(), Some(None));
    }

    #[test]
    fn a_file_gets_the_document() {
        let path = std::env::temp_dir().join(format!("ndma-output-test-{}.json", std::process::id()));
        let arg = JsonArg { json: Some(path.clone()) };
        assert_eq!(arg.write(&serde_json::json!({"command": "x", "n": 3})).ok(), Some(Some(path.clone())));
        let text = std::fs::read_to_string(&path).expect("written");
        let _ = std::fs::remove_file(&path);
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(v, serde_json::json!({"command": "x", "n": 3}));
    }

    #[test]
    fn the_up_front_check_names_an_unwritable_file_and_leaves_no_file_behind() {
        let bad = Path::new("/nonexistent-dir/ndma.json");
        assert!(
            matches!(check_writable(bad), Err(CliError::Io(m)) if m.starts_with("cannot write /nonexistent-dir/ndma.json: "))
        );
        let fresh = std::env::temp_dir().join(format!("ndma-check-test-{}.json", std::process::id()));
        assert_eq!(check_writable(&fresh).ok(), Some(()));
        assert!(!fresh.exists(), "the check must not leave a file it created");
        std::fs::write(&fresh, "kept").expect("write");
        assert_eq!(check_writable(&fresh).ok(), Some(()));
        let kept = std::fs::read_to_string(&fresh).expect("read");
        let _ = std::fs::remove_file(&fresh);
        assert_eq!(kept, "kept", "an existing file keeps its content until the run writes it");
    }

    #[test]
    fn the_json_file_is_none_for_stdout_and_without_json() {
        assert_eq!(JsonArg { json: Some("-".into()) }.file(), None);
        assert_eq!(JsonArg::default().file(), None);
        assert_eq!(JsonArg { json: Some("a.json".into()) }.file(), Some(Path::new("a.json")));
    }

    #[test]
    fn an_unwritable_file_is_an_io_error() {
        let arg = JsonArg { json: Some("/nonexistent-dir/ndma.json".into()) };
        assert!(matches!(arg.write(&1), Err(CliError::Io(m)) if m.contains("/nonexistent-dir/ndma.json")));
    }
}
