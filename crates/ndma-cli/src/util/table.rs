//! Plain-text tables (rendered by `comfy-table`): a header row, a rule of `-`, and columns padded to their
//! widest cell, two spaces apart. No borders, no colour, no wrapping: the output reads the same on a terminal,
//! in a file and through a pipe, and the tests split its rows on whitespace.

use comfy_table::{CellAlignment, ContentArrangement};

/// The table style, as a `comfy-table` preset (one character per component; a space omits the component):
/// only the header rule is drawn, made of `-` also across column gaps (its intersections).
const STYLE: &str = "     --            ";

/// A table being built.
#[derive(Debug)]
pub struct Table {
    inner: comfy_table::Table,
    right: Vec<bool>,
}

impl Table {
    /// A table with these columns; a column whose header starts with `>` is right-aligned (the `>` is not
    /// printed).
    pub fn new(headers: &[&str]) -> Self {
        let mut inner = comfy_table::Table::new();
        inner.load_preset(STYLE).set_content_arrangement(ContentArrangement::Disabled);
        inner.set_header(headers.iter().map(|h| h.trim_start_matches('>')).collect::<Vec<_>>());
        Table { inner, right: headers.iter().map(|h| h.starts_with('>')).collect() }
    }

    /// Appends a row (missing cells print empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.inner.add_row(cells);
    }

    /// The table as text, one line per row, each ending in a newline (trailing spaces trimmed).
    pub fn render(&self) -> String {
        let mut t = self.inner.clone();
        let cols = self.right.len();
        for (c, column) in t.column_iter_mut().enumerate() {
            // Two spaces between columns and none at the edges: one of padding, and the column of the header
            // rule's intersections (a space on every other line).
            column.set_padding((0, u16::from(c + 1 < cols)));
            if self.right.get(c).copied().unwrap_or(false) {
                column.set_cell_alignment(CellAlignment::Right);
            }
        }
        let mut out = String::new();
        for line in t.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A GB/s figure for a table.
pub fn fmt_gbps(g: f64) -> String {
    if g >= 100.0 {
        format!("{g:.0}")
    } else if g >= 1.0 {
        format!("{g:.2}")
    } else {
        format!("{g:.3}")
    }
}

/// A ratio for a table.
pub fn fmt_ratio(r: f64) -> String {
    format!("{r:.2}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_header_a_rule_and_aligned_columns() {
        let mut t = Table::new(&["name", ">value", "note"]);
        t.row(vec!["a".into(), "1".into(), "x".into()]);
        t.row(vec!["longer".into(), "12345".into()]);
        let want = "\
name    value  note
-------------------
a           1  x
longer  12345
";
        assert_eq!(t.render(), want);
    }

    #[test]
    fn header_cells_align_with_their_columns() {
        let mut t = Table::new(&[">idx", "flags"]);
        t.row(vec!["10".into(), "FIRST|LAST".into()]);
        assert_eq!(t.render(), "idx  flags\n---------------\n 10  FIRST|LAST\n");
    }
}
