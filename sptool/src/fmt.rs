//! Number formatting and plain-text tables shared by the text outputs.

/// Format like C's `%.{prec}g` (`alt == false`) or `%#.{prec}g` (`alt == true`,
/// trailing zeros kept): `0.161376`, `0.0301046`, `1.23457e-06`, `70478340`.
pub fn g(value: f64, prec: usize, alt: bool) -> String {
    let prec = prec.max(1);
    if value.is_nan() {
        return "nan".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if value == 0.0 {
        return if alt { format!("{:.*}", prec - 1, 0.0) } else { "0".into() };
    }
    // Round to `prec` significant digits first; the exponent of the rounded
    // value decides between fixed and scientific notation, exactly as in C.
    let sci = format!("{:.*e}", prec - 1, value);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= prec as i32 {
        let mantissa = if alt { mantissa.to_string() } else { trim_zeros(mantissa) };
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (prec as i32 - 1 - exp).max(0) as usize;
        let fixed = format!("{value:.decimals$}");
        if alt { fixed } else { trim_zeros(&fixed) }
    }
}

fn trim_zeros(text: &str) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text.to_string()
    }
}

/// A duration in seconds with six significant digits, or `-`.
pub fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| g(v, 6, false))
}

/// A counter or metric value: whole numbers in full, the rest with six
/// significant digits (trailing zeros kept, as in the Python tool's tables).
pub fn counter(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        g(value, 6, true)
    }
}

/// A list of non-negative integers with runs collapsed: `0-3,8,10-11`.
pub fn ranges(values: &[i64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i;
        while j + 1 < values.len() && values[j + 1] == values[j].wrapping_add(1) {
            j += 1;
        }
        if j > i {
            out.push(format!("{}-{}", values[i], values[j]));
        } else {
            out.push(values[i].to_string());
        }
        i = j + 1;
    }
    out.join(",")
}

/// Cut `text` to `width` characters, marking the cut.
pub fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let kept: String = text.chars().take(width.saturating_sub(4)).collect();
    format!("{kept} […]")
}

/// No line of a table is longer than this, terminal or not.
pub const MAX_LINE: usize = 199;
/// A shortened name keeps at least this many characters.
pub const MIN_NAME: usize = 16;

/// The width tables fit in: the terminal's (`$COLUMNS` when set, else the size of the
/// terminal on standard output), at most [`MAX_LINE`]; [`MAX_LINE`] without a terminal.
pub fn line_budget() -> usize {
    terminal_width().map_or(MAX_LINE, |w| w.clamp(40, MAX_LINE))
}

fn terminal_width() -> Option<usize> {
    if let Some(cols) = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok()).filter(|&c| c > 0) {
        return Some(cols);
    }
    // SAFETY: TIOCGWINSZ fills a winsize struct; it fails (returns -1) when stdout is not a terminal.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_col > 0).then_some(size.ws_col as usize)
}

/// Shorten `text` to `width` characters by replacing its middle with `…`, so that both the
/// start and the end of a long name stay readable.
pub fn shorten(text: &str, width: usize) -> String {
    let n = text.chars().count();
    if n <= width {
        return text.to_string();
    }
    if width <= 1 {
        return "…".chars().take(width).collect();
    }
    let keep = width - 1;
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut out: String = text.chars().take(head).collect();
    out.push('…');
    out.extend(text.chars().skip(n - tail));
    out
}

fn width(text: &str) -> usize {
    text.chars().count()
}

/// One line of a [`Table`]: cells, or a heading printed across the table.
pub enum Line {
    Cells(Vec<String>),
    Heading(String),
}

/// A borderless table: first column left-aligned, the others right-aligned,
/// columns two spaces apart, every line indented by two spaces.
pub struct Table {
    header: Vec<String>,
    lines: Vec<Line>,
    left_aligned: bool,
    /// Columns whose cells are shortened (middle ellipsis) when the table is wider than
    /// `max_width`, in the order they give up space.
    shrink: Vec<usize>,
    max_width: usize,
    /// Further left-aligned columns (text among numbers).
    left: Vec<usize>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            header: header.into_iter().map(Into::into).collect(),
            lines: Vec::new(),
            left_aligned: false,
            shrink: Vec::new(),
            max_width: usize::MAX,
            left: Vec::new(),
        }
    }

    /// Left-align column `column` too.
    pub fn left_column(mut self, column: usize) -> Self {
        self.left.push(column);
        self
    }

    /// Keep lines within `max_width` characters by shortening the cells of `columns`
    /// (names), first the first listed, down to [`MIN_NAME`] characters each.
    pub fn fit(mut self, max_width: usize, columns: &[usize]) -> Self {
        self.max_width = max_width;
        self.shrink = columns.to_vec();
        self
    }

    /// Left-align every column (for text, not numbers).
    pub fn left_aligned(mut self) -> Self {
        self.left_aligned = true;
        self
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.lines.push(Line::Cells(cells));
    }

    pub fn heading(&mut self, text: impl Into<String>) {
        self.lines.push(Line::Heading(text.into()));
    }

    pub fn render(&self, out: &mut String) {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| width(h)).collect();
        for line in &self.lines {
            if let Line::Cells(cells) = line {
                for (i, cell) in cells.iter().enumerate().take(columns) {
                    widths[i] = widths[i].max(width(cell));
                }
            }
        }
        // Line length: two spaces of indent, the cells, two spaces between cells.
        let total = |widths: &[usize]| 2 + widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
        for &c in &self.shrink {
            let excess = total(&widths).saturating_sub(self.max_width);
            if excess == 0 || c >= columns {
                continue;
            }
            widths[c] = widths[c].saturating_sub(excess).max(MIN_NAME.min(widths[c]));
        }
        let (shrink, left) = (&self.shrink, &self.left);
        let render_cells = |cells: &[String], out: &mut String| {
            let mut text = String::from(" ");
            for (i, w) in widths.iter().enumerate() {
                let cell = cells.get(i).map_or("", String::as_str);
                let shortened;
                let cell = if shrink.contains(&i) && width(cell) > *w {
                    shortened = shorten(cell, *w);
                    shortened.as_str()
                } else {
                    cell
                };
                let pad = w.saturating_sub(width(cell));
                text.push(' ');
                if i == 0 || self.left_aligned || left.contains(&i) {
                    if i > 0 {
                        text.push(' ');
                    }
                    text.push_str(cell);
                    text.push_str(&" ".repeat(pad));
                } else {
                    text.push(' ');
                    text.push_str(&" ".repeat(pad));
                    text.push_str(cell);
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        render_cells(&self.header, out);
        for line in &self.lines {
            match line {
                Line::Cells(cells) => render_cells(cells, out),
                Line::Heading(text) => {
                    out.push_str("  ");
                    out.push_str(text);
                    out.push('\n');
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_matches_c_printf() {
        assert_eq!(g(0.161376, 6, false), "0.161376");
        assert_eq!(g(0.0301046, 6, true), "0.0301046");
        assert_eq!(g(0.7962, 6, true), "0.796200");
        assert_eq!(g(1.7821, 6, true), "1.78210");
        assert_eq!(g(1.234567e-6, 6, false), "1.23457e-06");
        assert_eq!(g(123456789.0, 6, false), "1.23457e+08");
        assert_eq!(g(999999.5, 6, false), "1e+06");
        assert_eq!(g(12.5, 6, false), "12.5");
        assert_eq!(g(0.0001, 6, false), "0.0001");
        assert_eq!(g(-2.0, 6, false), "-2");
        assert_eq!(g(0.0, 6, true), "0.00000");
        assert_eq!(g(f64::NAN, 6, false), "nan");
    }

    #[test]
    fn counters_and_ranges() {
        assert_eq!(counter(70478340.0), "70478340");
        assert_eq!(counter(0.7962), "0.796200");
        assert_eq!(ranges(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(ranges(&[5]), "5");
        assert_eq!(ranges(&[]), "");
    }

    #[test]
    fn shorten_keeps_both_ends() {
        assert_eq!(shorten("abcdefghij", 10), "abcdefghij");
        assert_eq!(shorten("abcdefghij", 7), "abc…hij");
        assert_eq!(shorten("abcdefghij", 6), "abc…ij");
        assert_eq!(shorten("é".repeat(300).as_str(), 20).chars().count(), 20);
    }

    #[test]
    fn table_fits_by_shortening_names() {
        let mut t = Table::new(["region", "calls"]).fit(30, &[0]);
        t.row(vec!["x".repeat(100), "1".into()]);
        t.row(vec!["short".into(), "2".into()]);
        let mut out = String::new();
        t.render(&mut out);
        assert!(out.lines().all(|l| l.chars().count() <= 30), "{out}");
        assert!(out.contains("xxxxxxxxxx…xxxxxxxxxx"), "{out}");
        assert!(out.contains("  short "), "{out}");
    }

    #[test]
    fn table_alignment() {
        let mut t = Table::new(["name", "n"]);
        t.row(vec!["a".into(), "1".into()]);
        t.heading("Section");
        t.row(vec!["long name".into(), "100".into()]);
        let mut out = String::new();
        t.render(&mut out);
        assert_eq!(out, "  name         n\n  a            1\n  Section\n  long name  100\n");
    }
}
