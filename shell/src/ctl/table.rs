//! Plain aligned columns for a terminal: a header, one line per row, two spaces between
//! columns, empty cells as `-`, control characters of any cell shown as `?` (a cell may hold
//! text a member wrote).

pub struct Table<const N: usize> {
    head: [&'static str; N],
    rows: Vec<[String; N]>,
}

impl<const N: usize> Table<N> {
    pub fn new(head: [&'static str; N]) -> Self {
        Table {
            head,
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: [String; N]) {
        self.rows.push(cells.map(|c| {
            let c: String = c
                .chars()
                .map(|ch| if ch.is_control() { '?' } else { ch })
                .collect();
            if c.is_empty() {
                "-".into()
            } else {
                c
            }
        }));
    }

    pub fn render(&self) -> String {
        let mut width = self.head.map(|h| h.chars().count());
        for r in &self.rows {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: [&str; N]| {
            let mut s = String::new();
            for (i, (c, w)) in cells.iter().zip(width).enumerate() {
                if i + 1 == N {
                    s.push_str(c);
                } else {
                    s.push_str(&format!("{c:<w$}  "));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = line(self.head);
        for r in &self.rows {
            out.push_str(&line(std::array::from_fn(|i| r[i].as_str())));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_hostile_cells_are_defused() {
        let mut t = Table::new(["GID", "STATUS"]);
        t.row(["m1".into(), "IDLE".into()]);
        t.row(["member-two".into(), "\x1b[2Jwiped".into()]);
        t.row(["m3".into(), String::new()]);
        assert_eq!(
            t.render(),
            "GID         STATUS\nm1          IDLE\nmember-two  ?[2Jwiped\nm3          -\n"
        );
    }
}
