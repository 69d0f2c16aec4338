//! A small SVG writer for the charts: plain SVG 1.1 that GitHub's markdown shows as an
//! image (no scripts, no style sheets, no external fonts: `font-family="sans-serif"`),
//! a light background, every text taken from JSON escaped, and numbers printed with a
//! fixed number of decimals so the same input gives the same bytes.
//!
//! Also the scales (linear, log10) with their ticks, the axes, and the placement of
//! labels of vertical reference lines in rows that do not overlap.

use std::fmt::Write as _;

/// Colours, chosen to stay apart for colour-blind readers (Okabe–Ito) on white.
pub mod colour {
    pub const BLUE: &str = "#0072b2";
    pub const ORANGE: &str = "#d55e00";
    pub const GREEN: &str = "#009e73";
    pub const RED: &str = "#c0392b";
    pub const PURPLE: &str = "#8e44ad";
    pub const GREY: &str = "#777777";
    pub const LIGHT_GREY: &str = "#e6e6e6";
    pub const TEXT: &str = "#222222";
    pub const BACKGROUND: &str = "#ffffff";
    pub const SHADE: &str = "#f2f2f2";
    /// Behind a marked stretch of bars (the worst 10 s of a window).
    pub const WORST: &str = "#f9d9d4";
}

/// `text` with the five XML special characters escaped (for text and attributes).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0 at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// How a text is set.
#[derive(Debug, Clone, Copy)]
pub struct Font {
    pub size: f64,
    pub anchor: Anchor,
    pub bold: bool,
    pub fill: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

impl Font {
    pub const fn new(size: f64) -> Self {
        Font {
            size,
            anchor: Anchor::Start,
            bold: false,
            fill: colour::TEXT,
        }
    }
    pub const fn anchor(mut self, anchor: Anchor) -> Self {
        self.anchor = anchor;
        self
    }
    pub const fn bold(mut self) -> Self {
        self.bold = true;
        self
    }
    pub const fn fill(mut self, fill: &'static str) -> Self {
        self.fill = fill;
        self
    }
}

/// A stroke: colour, width and an optional dash pattern.
#[derive(Debug, Clone, Copy)]
pub struct Stroke {
    pub colour: &'static str,
    pub width: f64,
    pub dash: Option<&'static str>,
}

impl Stroke {
    pub const fn solid(colour: &'static str, width: f64) -> Self {
        Stroke {
            colour,
            width,
            dash: None,
        }
    }
    pub const fn dashed(colour: &'static str, width: f64) -> Self {
        Stroke {
            colour,
            width,
            dash: Some("6 4"),
        }
    }
    pub const fn dotted(colour: &'static str, width: f64) -> Self {
        Stroke {
            colour,
            width,
            dash: Some("2 3"),
        }
    }
}

/// The width a text of `chars` characters takes at `size`, roughly (sans-serif
/// averages a little over half an em): enough to keep labels apart.
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.56
}

/// An SVG document being written.
pub struct Svg {
    out: String,
}

impl Svg {
    /// A `width` × `height` document with its accessible `title` and a light
    /// background.
    pub fn new(width: f64, height: f64, title: &str) -> Self {
        let mut svg = Svg { out: String::new() };
        svg.raw(format_args!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
             viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\">\n<title>{}</title>\n",
            escape(title)
        ));
        svg.rect(0.0, 0.0, width, height, colour::BACKGROUND, None);
        svg
    }

    fn raw(&mut self, args: std::fmt::Arguments<'_>) {
        // Writing into a String cannot fail.
        let _ = self.out.write_fmt(args);
    }

    /// ` class="..."` or nothing.
    fn class(class: Option<&str>) -> String {
        class.map_or(String::new(), |c| format!(" class=\"{}\"", escape(c)))
    }

    fn stroke_attributes(stroke: Stroke) -> String {
        let dash = stroke
            .dash
            .map_or(String::new(), |d| format!(" stroke-dasharray=\"{d}\""));
        format!(
            "stroke=\"{}\" stroke-width=\"{:.1}\"{dash}",
            stroke.colour, stroke.width
        )
    }

    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, class: Option<&str>) {
        self.raw(format_args!(
            "<rect{} x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\"/>\n",
            Self::class(class),
            w.max(0.0),
            h.max(0.0)
        ));
    }

    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), stroke: Stroke, class: Option<&str>) {
        self.raw(format_args!(
            "<line{} x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" {}/>\n",
            Self::class(class),
            from.0,
            from.1,
            to.0,
            to.1,
            Self::stroke_attributes(stroke)
        ));
    }

    /// A filled dot; `hollow` draws its outline only.
    pub fn dot(&mut self, centre: (f64, f64), r: f64, colour: &str, hollow: bool, class: &str) {
        let paint = if hollow {
            format!(
                "fill=\"{}\" stroke=\"{colour}\" stroke-width=\"1.5\"",
                colour::BACKGROUND
            )
        } else {
            format!("fill=\"{colour}\"")
        };
        self.raw(format_args!(
            "<circle class=\"{}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"{r:.1}\" {paint}/>\n",
            escape(class),
            centre.0,
            centre.1
        ));
    }

    /// Many dots as one path: a zero-length segment per dot, drawn with round caps
    /// (`radius` × 2 wide). A thousand dots take a tenth of what circles would.
    pub fn dots(&mut self, centres: &[(f64, f64)], radius: f64, colour: &str, class: &str) {
        let mut d = String::new();
        for (x, y) in centres {
            let _ = write!(d, "M{x:.1} {y:.1}h0");
        }
        self.raw(format_args!(
            "<path class=\"{}\" d=\"{d}\" fill=\"none\" stroke=\"{colour}\" \
             stroke-width=\"{:.1}\" stroke-linecap=\"round\" stroke-opacity=\"0.45\"/>\n",
            escape(class),
            radius * 2.0
        ));
    }

    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: Stroke, class: Option<&str>) {
        let mut list = String::new();
        for (i, (x, y)) in points.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            let _ = write!(list, "{sep}{x:.1},{y:.1}");
        }
        self.raw(format_args!(
            "<polyline{} points=\"{list}\" fill=\"none\" {}/>\n",
            Self::class(class),
            Self::stroke_attributes(stroke)
        ));
    }

    /// `text` (escaped) at `(x, y)`, the baseline at `y`.
    pub fn text(&mut self, at: (f64, f64), text: &str, font: Font) {
        self.text_with_class(at, text, font, None);
    }

    pub fn text_with_class(&mut self, at: (f64, f64), text: &str, font: Font, class: Option<&str>) {
        let anchor = match font.anchor {
            Anchor::Start => "",
            Anchor::Middle => " text-anchor=\"middle\"",
            Anchor::End => " text-anchor=\"end\"",
        };
        let weight = if font.bold {
            " font-weight=\"bold\""
        } else {
            ""
        };
        self.raw(format_args!(
            "<text{} x=\"{:.1}\" y=\"{:.1}\" font-size=\"{:.0}\" fill=\"{}\"{anchor}{weight}>{}</text>\n",
            Self::class(class),
            at.0,
            at.1,
            font.size,
            font.fill,
            escape(text)
        ));
    }

    /// `text` rotated a quarter turn anticlockwise, centred on `at` (a y-axis label).
    pub fn vertical_text(&mut self, at: (f64, f64), text: &str, font: Font) {
        self.raw(format_args!(
            "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{:.0}\" fill=\"{}\" text-anchor=\"middle\" \
             transform=\"rotate(-90 {x:.1} {y:.1})\">{}</text>\n",
            font.size,
            font.fill,
            escape(text),
            x = at.0,
            y = at.1,
        ));
    }

    /// The document, closed.
    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// A map from data values to pixels.
pub trait Scale {
    /// The pixel position of `value` (clamped to the domain for a log scale).
    fn at(&self, value: f64) -> f64;
    /// Values worth a tick and a grid line.
    fn ticks(&self) -> Vec<f64>;
}

/// A linear scale from `domain` to `range` (pixels).
#[derive(Debug, Clone, Copy)]
pub struct Linear {
    pub domain: (f64, f64),
    pub range: (f64, f64),
    /// About how many ticks.
    pub ticks: usize,
}

impl Linear {
    /// From 0 (or `min` when lower) to `max` rounded up to a tick.
    pub fn from_zero(max: f64, range: (f64, f64), ticks: usize) -> Self {
        let step = nice_step(max.max(f64::MIN_POSITIVE), ticks);
        let top = (max / step).ceil().max(1.0) * step;
        Linear {
            domain: (0.0, top),
            range,
            ticks,
        }
    }
}

impl Scale for Linear {
    fn at(&self, value: f64) -> f64 {
        let (d0, d1) = self.domain;
        let (r0, r1) = self.range;
        let span = if d1 == d0 { 1.0 } else { d1 - d0 };
        r0 + (value - d0) / span * (r1 - r0)
    }

    fn ticks(&self) -> Vec<f64> {
        let (d0, d1) = self.domain;
        let step = nice_step(d1 - d0, self.ticks);
        let first = (d0 / step).ceil() as i64;
        let last = (d1 / step + 1e-9).floor() as i64;
        (first..=last).map(|k| k as f64 * step).collect()
    }
}

/// A step of 1, 2 or 5 × 10ⁿ that cuts `span` into about `count` pieces.
pub fn nice_step(span: f64, count: usize) -> f64 {
    let raw = span / count.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// A log10 scale over whole decades.
#[derive(Debug, Clone, Copy)]
pub struct Log10 {
    /// The decades' exponents: 10^lo to 10^hi.
    pub decades: (i32, i32),
    pub range: (f64, f64),
}

impl Log10 {
    /// The decades that hold `min` to `max` (both > 0).
    pub fn covering(min: f64, max: f64, range: (f64, f64)) -> Self {
        let lo = min.max(1e-9).log10().floor() as i32;
        let hi = (max.max(min).max(1e-9).log10().ceil() as i32).max(lo + 1);
        Log10 {
            decades: (lo, hi),
            range,
        }
    }

    pub fn min(&self) -> f64 {
        10f64.powi(self.decades.0)
    }
}

impl Scale for Log10 {
    fn at(&self, value: f64) -> f64 {
        let (lo, hi) = (f64::from(self.decades.0), f64::from(self.decades.1));
        let v = value.max(self.min()).log10().clamp(lo, hi);
        let (r0, r1) = self.range;
        r0 + (v - lo) / (hi - lo) * (r1 - r0)
    }

    fn ticks(&self) -> Vec<f64> {
        (self.decades.0..=self.decades.1)
            .map(|e| 10f64.powi(e))
            .collect()
    }
}

/// A number as a tick label: no trailing zeros, thousands apart (`1,000`).
pub fn tick_label(value: f64) -> String {
    if value != 0.0 && value.abs() < 1.0 {
        let text = format!("{value:.3}");
        return text.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    let rounded = value.round();
    if (value - rounded).abs() > 1e-9 {
        return format!("{value:.1}");
    }
    let digits = format!("{}", rounded.abs() as u64);
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    if rounded < 0.0 {
        format!("-{grouped}")
    } else {
        grouped
    }
}

/// The plot area: left, top, right, bottom in pixels.
#[derive(Debug, Clone, Copy)]
pub struct Area {
    pub left: f64,
    pub top: f64,
    pub right: f64,
    pub bottom: f64,
}

/// The x axis along the bottom of `area`: grid lines, ticks, their labels and the axis
/// label (with its unit) below.
pub fn x_axis(svg: &mut Svg, area: Area, scale: &dyn Scale, label: &str) {
    for tick in scale.ticks() {
        let x = scale.at(tick);
        svg.line(
            (x, area.top),
            (x, area.bottom),
            Stroke::solid(colour::LIGHT_GREY, 1.0),
            None,
        );
        svg.line(
            (x, area.bottom),
            (x, area.bottom + 4.0),
            Stroke::solid(colour::GREY, 1.0),
            None,
        );
        svg.text(
            (x, area.bottom + 16.0),
            &tick_label(tick),
            Font::new(11.0).anchor(Anchor::Middle),
        );
    }
    svg.line(
        (area.left, area.bottom),
        (area.right, area.bottom),
        Stroke::solid(colour::GREY, 1.0),
        None,
    );
    if !label.is_empty() {
        svg.text(
            ((area.left + area.right) / 2.0, area.bottom + 34.0),
            label,
            Font::new(12.0).anchor(Anchor::Middle),
        );
    }
}

/// The y axis along the left of `area`: grid lines, ticks, labels and the axis label
/// (with its unit), turned.
pub fn y_axis(svg: &mut Svg, area: Area, scale: &dyn Scale, label: &str) {
    for tick in scale.ticks() {
        let y = scale.at(tick);
        svg.line(
            (area.left, y),
            (area.right, y),
            Stroke::solid(colour::LIGHT_GREY, 1.0),
            None,
        );
        svg.text(
            (area.left - 6.0, y + 4.0),
            &tick_label(tick),
            Font::new(11.0).anchor(Anchor::End),
        );
    }
    svg.line(
        (area.left, area.top),
        (area.left, area.bottom),
        Stroke::solid(colour::GREY, 1.0),
        None,
    );
    svg.vertical_text(
        (area.left - 44.0, (area.top + area.bottom) / 2.0),
        label,
        Font::new(12.0),
    );
}

/// A vertical reference line (a target, a floor) across a plot, labelled above it.
pub struct ReferenceLine {
    pub x: f64,
    pub label: String,
    pub stroke: Stroke,
    pub class: &'static str,
}

const LABEL_FONT: Font = Font::new(11.0);
/// The distance between two rows of reference line labels.
pub const LABEL_ROW: f64 = 14.0;

/// Where each label goes (in the order of `lines`): its left end and its row, the
/// first row (counted upwards) where it overlaps no other label. Labels are centred
/// on their line, but kept between `bounds` (pixels).
fn place_labels(lines: &[ReferenceLine], bounds: (f64, f64)) -> Vec<(f64, usize)> {
    let mut order: Vec<usize> = (0..lines.len()).collect();
    order.sort_by(|&a, &b| lines[a].x.total_cmp(&lines[b].x));
    let mut row_ends: Vec<f64> = Vec::new();
    let mut placed = vec![(0.0, 0); lines.len()];
    for i in order {
        let width = text_width(&lines[i].label, LABEL_FONT.size);
        let start = (lines[i].x - width / 2.0)
            .min(bounds.1 - width)
            .max(bounds.0);
        let row = row_ends
            .iter()
            .position(|&end| end + 8.0 <= start)
            .unwrap_or(row_ends.len());
        if row == row_ends.len() {
            row_ends.push(start + width);
        } else {
            row_ends[row] = start + width;
        }
        placed[i] = (start, row);
    }
    placed
}

/// How many label rows `lines` need above a plot, their labels kept between `bounds`.
pub fn label_rows(lines: &[ReferenceLine], bounds: (f64, f64)) -> usize {
    place_labels(lines, bounds)
        .iter()
        .map(|&(_, row)| row + 1)
        .max()
        .unwrap_or(0)
}

/// Draws `lines` across `area`, their labels stacked above it (row 0 just above
/// `area.top`) and kept between `bounds`.
pub fn reference_lines(svg: &mut Svg, area: Area, lines: &[ReferenceLine], bounds: (f64, f64)) {
    for (line, (start, row)) in lines.iter().zip(place_labels(lines, bounds)) {
        let y = area.top - 6.0 - row as f64 * LABEL_ROW;
        svg.line(
            (line.x, y + 3.0),
            (line.x, area.bottom),
            line.stroke,
            Some(line.class),
        );
        svg.text((start, y), &line.label, LABEL_FONT.fill(line.stroke.colour));
    }
}

/// The heights of labels wanted at `ys` (in any order), moved apart where needed so
/// that two are at least `gap` apart; in the order given.
pub fn spread_apart(ys: &[f64], gap: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..ys.len()).collect();
    order.sort_by(|&a, &b| ys[a].total_cmp(&ys[b]));
    let mut placed = ys.to_vec();
    let mut previous: Option<f64> = None;
    for i in order {
        let y = previous.map_or(ys[i], |p| ys[i].max(p + gap));
        placed[i] = y;
        previous = Some(y);
    }
    placed
}

/// Labels in the right margin at `x`, each next to the height of its horizontal line
/// (`(y, text, colour)`), moved apart where they would overlap.
pub fn margin_labels(svg: &mut Svg, x: f64, labels: &[(f64, String, &'static str)]) {
    let ys: Vec<f64> = labels.iter().map(|l| l.0).collect();
    for ((_, text, colour), y) in labels.iter().zip(spread_apart(&ys, 13.0)) {
        svg.text((x, y + 4.0), text, Font::new(11.0).fill(colour));
    }
}

/// `text` cut into lines of at most `width` characters, at spaces.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Writes `text` wrapped to `width` characters from `at` downwards, `leading` apart;
/// returns the y below the last line.
pub fn paragraph(svg: &mut Svg, at: (f64, f64), text: &str, width: usize, font: Font) -> f64 {
    let leading = font.size * 1.35;
    let mut y = at.1;
    for line in wrap(text, width) {
        svg.text((at.0, y), &line, font);
        y += leading;
    }
    y
}

/// A chart's closing text under its plot, from `top`: the notes, then the footnote
/// (the input file and the command that made it), both grey and `width` wide.
pub fn notes_and_footnote(svg: &mut Svg, top: f64, notes: &str, footnote: &str, width: usize) {
    let font = Font::new(11.0).fill(colour::GREY);
    let y = paragraph(svg, (16.0, top), notes, width, font);
    paragraph(svg, (16.0, y + 4.0), footnote, width, font);
}

/// `value` with at most two decimals, trailing zeros dropped: `3.75`, `2.5`, `0`.
pub fn short_number(value: f64) -> String {
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A number in a text: one decimal.
pub fn seconds(value: f64) -> String {
    format!("{value:.1} s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_control_characters() {
        assert_eq!(
            escape("<a href=\"x\">Tom & Jerry's</a>\u{1}"),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&apos;s&lt;/a&gt; "
        );
    }

    #[test]
    fn nice_steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(30.0, 6), 5.0);
        assert_eq!(nice_step(92.0, 10), 10.0);
        assert_eq!(nice_step(0.9, 5), 0.2);
        assert_eq!(nice_step(450.0, 8), 100.0);
    }

    #[test]
    fn linear_scale_maps_ends_and_ticks_stay_inside() {
        let s = Linear::from_zero(23.7, (100.0, 500.0), 6);
        assert_eq!(s.domain, (0.0, 25.0));
        assert_eq!(s.at(0.0), 100.0);
        assert_eq!(s.at(25.0), 500.0);
        assert_eq!(s.ticks(), vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0]);
    }

    #[test]
    fn log_scale_covers_whole_decades() {
        let s = Log10::covering(0.7, 231_900.0, (0.0, 600.0));
        assert_eq!(s.decades, (-1, 6));
        assert_eq!(s.ticks().len(), 8);
        assert!((s.at(1.0) - 600.0 / 7.0).abs() < 1e-9);
        assert_eq!(s.at(0.0), 0.0, "values below the domain sit at its start");
    }

    #[test]
    fn reference_labels_that_would_overlap_go_to_another_row() {
        let line = |x: f64, label: &str| ReferenceLine {
            x,
            label: label.to_string(),
            stroke: Stroke::solid(colour::RED, 1.0),
            class: "target",
        };
        let apart = [line(100.0, "a"), line(400.0, "b")];
        assert_eq!(label_rows(&apart, (0.0, 800.0)), 1);
        let close = [
            line(300.0, "target: median 15 s"),
            line(310.0, "measured median 14.8 s"),
            line(500.0, "far"),
        ];
        let placed = place_labels(&close, (0.0, 505.0));
        assert_eq!(placed.iter().map(|p| p.1).collect::<Vec<_>>(), [0, 1, 0]);
        assert_eq!(label_rows(&close, (0.0, 505.0)), 2);
        // "far" (18.5 px wide) centred on 500 would end at 509: moved left to end at 505.
        assert!((placed[2].0 + text_width("far", 11.0) - 505.0).abs() < 1e-9);
    }

    #[test]
    fn labels_too_close_are_moved_down_in_order() {
        assert_eq!(spread_apart(&[100.0, 50.0], 13.0), [100.0, 50.0]);
        assert_eq!(
            spread_apart(&[105.0, 100.0, 20.0], 13.0),
            [113.0, 100.0, 20.0]
        );
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short_number(3.75), "3.75");
        assert_eq!(short_number(2.5), "2.5");
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(10.0), "10");
    }

    #[test]
    fn wrap_cuts_at_spaces() {
        assert_eq!(wrap("one two three four", 9), ["one two", "three", "four"]);
        assert!(wrap("", 10).is_empty());
    }

    #[test]
    fn tick_labels() {
        assert_eq!(tick_label(1000.0), "1,000");
        assert_eq!(tick_label(100_000.0), "100,000");
        assert_eq!(tick_label(0.1), "0.1");
        assert_eq!(tick_label(2.5), "2.5");
        assert_eq!(tick_label(0.0), "0");
    }
}
