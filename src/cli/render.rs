//! One way to print an answer: the server's JSON with `--json`, a table
//! (or a line) otherwise.

use comfy_table::presets::NOTHING;
use comfy_table::{CellAlignment, Table};
use serde::Serialize;

/// How answers are printed.
#[derive(Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `value` as pretty JSON with `--json`, else lets `human`
    /// print it.
    pub fn show<T: Serialize>(self, value: &T, human: impl FnOnce(&T)) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(value)?);
        } else {
            human(value);
        }
        Ok(())
    }
}

/// A table with a header row; `(none)` for no rows. Widths are display
/// widths (a CJK character or an emoji takes two columns).
pub fn table<const N: usize>(headers: [&str; N], rows: impl IntoIterator<Item = [String; N]>) {
    let mut t = Table::new();
    t.load_preset(NOTHING).set_header(headers);
    let mut any = false;
    for row in rows {
        t.add_row(row);
        any = true;
    }
    if !any {
        println!("(none)");
        return;
    }
    for column in t.column_iter_mut() {
        column.set_padding((0, 2));
        column.set_cell_alignment(CellAlignment::Left);
    }
    for line in t.lines() {
        println!("{}", line.trim_end());
    }
}

/// An optional value as a cell: `-` when absent.
pub fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_string(), T::to_string)
}

/// A time as the JSON has it (`2026-03-02T10:00:00Z`).
pub fn time(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Seconds as `12 s`, `5 min` or `1.5 h`.
pub fn idle(secs: f64) -> String {
    if secs < 60.0 {
        format!("{secs:.0} s")
    } else if secs < 3600.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{:.1} h", secs / 3600.0)
    }
}

/// One line of at most `max` characters, ending in `…` when cut.
pub fn shorten(s: &str, max: usize) -> String {
    let one_line = s.replace('\n', " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max - 1).collect::<String>())
    }
}
