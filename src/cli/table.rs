//! Plain aligned text tables, kubectl style: upper-case headers, two spaces apart.
//! Cells often quote a BMC; each is escaped ([`crate::untrusted::line`]) so none can
//! move the cursor, clear the screen or start a new line.

/// Renders rows under headers; every row must have as many cells as there are headers.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| crate::untrusted::line(c)).collect())
        .collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            text.push_str(cell);
            let pad = width.saturating_sub(cell.chars().count()) + 2;
            text.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_align() {
        let t = super::render(
            &["NODE", "POWER"],
            &[
                vec!["worker-1".into(), "On".into()],
                vec!["w2".into(), "Off".into()],
            ],
        );
        assert_eq!(t, "NODE      POWER\nworker-1  On\nw2        Off\n");
    }

    #[test]
    fn cells_cannot_move_the_cursor_or_start_a_line() {
        let t = super::render(
            &["NODE", "ERROR"],
            &[vec!["worker-1".into(), "\u{1b}[2J\r\nworker-2  Off".into()]],
        );
        assert_eq!(t.lines().count(), 2, "{t:?}");
        assert!(
            t.lines()
                .all(|l| !l.chars().any(crate::untrusted::is_unsafe)),
            "{t:?}"
        );
        assert!(t.contains("\\u{1b}[2J\\r\\nworker-2  Off"), "{t:?}");
    }
}
