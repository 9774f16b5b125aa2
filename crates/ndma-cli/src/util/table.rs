//! Plain-text tables: a header row, a rule, and columns padded to their widest cell.

/// A table being built.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns; a column whose header starts with `>` is right-aligned (the `>` is not
    /// printed).
    pub fn new(headers: &[&str]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.trim_start_matches('>').to_string()).collect(),
            right: headers.iter().map(|h| h.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells print empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, each ending in a newline.
    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let cell = |r: &Vec<String>, c: usize| r.get(c).map_or(0, |s| s.chars().count());
        let widths: Vec<usize> = (0..cols)
            .map(|c| self.rows.iter().map(|r| cell(r, c)).max().unwrap_or(0).max(self.headers[c].chars().count()))
            .collect();
        let line = |cells: &[String]| {
            let mut out = String::new();
            for (c, (&width, &right)) in widths.iter().zip(&self.right).enumerate() {
                let s = cells.get(c).map_or("", String::as_str);
                let pad = " ".repeat(width.saturating_sub(s.chars().count()));
                if c > 0 {
                    out.push_str("  ");
                }
                if right {
                    out.push_str(&pad);
                    out.push_str(s);
                } else {
                    out.push_str(s);
                    out.push_str(&pad);
                }
            }
            let mut out = out.trim_end().to_string();
            out.push('\n');
            out
        };
        let mut out = line(&self.headers);
        out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * cols.saturating_sub(1)));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
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
