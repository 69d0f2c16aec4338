//! The documentation holds together: README.md stays a page a user reads (at most
//! 400 lines, the demo and the test command on its first screen, the test command the
//! one CI runs), and every relative Markdown link in README.md and docs/*.md leads to
//! a file that exists and, when it names an `#anchor`, to a heading of that file, under
//! GitHub's rules for heading anchors (lowercase; punctuation other than `-` and `_`
//! removed; each space a `-`; a repeated heading gets `-1`, `-2`, ...). Links to
//! `http://`, `https://` and `mailto:` are not followed; links inside fenced code
//! blocks and code spans are not links.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

const README_MAX_LINES: usize = 400;
const FIRST_SCREEN_LINES: usize = 40;
/// The demo and the test command (`cargo xtask test`: `cargo test --workspace` with
/// the list of skipped tests at the end, xtask/src/test_run.rs).
const FIRST_SCREEN_COMMANDS: [&str; 2] = ["cargo run --release -- demo", TEST_COMMAND];
const TEST_COMMAND: &str = "cargo xtask test";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// README.md and every `.md` file directly under docs/, as paths relative to the root.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| PathBuf::from("docs").join(p.file_name().expect("a file name")))
        .collect();
    docs.sort();
    docs.insert(0, PathBuf::from("README.md"));
    docs
}

/// The opening marker of a fenced code block (```` ``` ```` or `~~~`, at least three,
/// after at most three spaces of indentation, or any indentation inside a list item).
fn fence_marker(line: &str) -> Option<(char, usize)> {
    let trimmed = line.trim_start();
    let ch = trimmed.chars().next()?;
    if ch != '`' && ch != '~' {
        return None;
    }
    let len = trimmed.chars().take_while(|c| *c == ch).count();
    (len >= 3).then_some((ch, len))
}

/// Tracks fenced code blocks line by line.
#[derive(Default)]
struct Fences {
    open: Option<(char, usize)>,
}

impl Fences {
    /// True when `line` is part of a fenced code block (its fences included).
    fn in_code(&mut self, line: &str) -> bool {
        match (self.open, fence_marker(line)) {
            (Some((ch, len)), Some((c, l))) if c == ch && l >= len => {
                // A closing fence carries nothing after its marker.
                if line.trim().chars().all(|x| x == ch) {
                    self.open = None;
                }
                true
            }
            (Some(_), _) => true,
            (None, Some(marker)) => {
                self.open = Some(marker);
                true
            }
            (None, None) => false,
        }
    }
}

/// `line` with its code spans (`` `...` ``, ``` ``...`` ```) blanked out, so that text
/// shown as code is never taken for a link. An unclosed backtick run is kept as text.
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        let mut j = i + run;
        let mut closed = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let r = chars[j..].iter().take_while(|c| **c == '`').count();
                if r == run {
                    closed = Some(j + r);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match closed {
            Some(end) => {
                out.push(' ');
                i = end;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// One link: where it is (1-based line) and what it points to.
#[derive(Debug)]
struct Link {
    line: usize,
    target: String,
}

/// Every link target `[text](target)` (images included) and reference definition
/// `[label]: target` outside fenced code blocks and code spans.
fn links(markdown: &str) -> Vec<Link> {
    let mut out = Vec::new();
    let mut fences = Fences::default();
    for (n, raw) in markdown.lines().enumerate() {
        if fences.in_code(raw) {
            continue;
        }
        let line = without_code_spans(raw);
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[')
            && let Some(close) = rest.find(']')
            && rest[close..].starts_with("]:")
        {
            let target = rest[close + 2..].split_whitespace().next().unwrap_or("");
            out.push(Link {
                line: n + 1,
                target: target.trim_matches(['<', '>']).to_string(),
            });
            continue;
        }
        let mut from = 0;
        while let Some(at) = line[from..].find("](") {
            let start = from + at + 2;
            let mut depth = 0usize;
            let mut end = None;
            for (k, c) in line[start..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = Some(start + k);
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let Some(end) = end else { break };
            // `[text](target "title")`: the target is the first word.
            let inside = line[start..end].trim();
            let target = inside.split_whitespace().next().unwrap_or("");
            out.push(Link {
                line: n + 1,
                target: target.trim_matches(['<', '>']).to_string(),
            });
            from = end + 1;
        }
    }
    out
}

/// The text a heading shows: links reduced to their text, code spans to their
/// content, HTML tags dropped.
fn heading_text(raw: &str) -> String {
    let mut s = raw.trim().to_string();
    // `[text](url)` → `text`
    while let Some(open) = s.find('[') {
        let Some(mid) = s[open..].find("](").map(|m| open + m) else {
            break;
        };
        let Some(close) = s[mid..].find(')').map(|c| mid + c) else {
            break;
        };
        s = format!("{}{}{}", &s[..open], &s[open + 1..mid], &s[close + 1..]);
    }
    let mut out = String::new();
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            '`' => {}
            _ => out.push(c),
        }
    }
    out
}

/// GitHub's anchor for a heading's text (before duplicates are numbered).
fn slug(text: &str) -> String {
    heading_text(text)
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of every heading of a document, in order, duplicates numbered as
/// GitHub numbers them.
fn anchors(markdown: &str) -> Vec<String> {
    let mut headings = Vec::new();
    let mut fences = Fences::default();
    let mut previous: Option<&str> = None;
    for line in markdown.lines() {
        if fences.in_code(line) {
            previous = None;
            continue;
        }
        let indent = line.len() - line.trim_start_matches(' ').len();
        let trimmed = line.trim();
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if indent <= 3
            && (1..=6).contains(&hashes)
            && (trimmed.len() == hashes || trimmed[hashes..].starts_with([' ', '\t']))
        {
            // An ATX heading; a closing run of `#` after a space is not part of it.
            let content = trimmed[hashes..].trim();
            let open = content.trim_end_matches('#');
            let text = if open.is_empty() || open.ends_with([' ', '\t']) {
                open.trim_end()
            } else {
                content
            };
            headings.push(text.to_string());
            previous = None;
            continue;
        }
        // A setext heading: a paragraph line underlined with `=` or `-`.
        let underline = !trimmed.is_empty()
            && (trimmed.chars().all(|c| c == '=') || trimmed.chars().all(|c| c == '-'));
        if indent <= 3
            && underline
            && let Some(text) = previous
        {
            headings.push(text.trim().to_string());
            previous = None;
            continue;
        }
        let paragraph = !trimmed.is_empty()
            && indent <= 3
            && !trimmed.starts_with(['|', '>', '-', '*', '+'])
            && !trimmed.chars().next().is_some_and(|c| c.is_ascii_digit());
        previous = paragraph.then_some(line);
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    headings
        .iter()
        .map(|h| {
            let base = slug(h);
            let n = seen.entry(base.clone()).or_insert(0);
            let anchor = if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            *n += 1;
            anchor
        })
        .collect()
}

/// `%20` and the like, as a browser reads them in a link.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `base`'s directory joined with `relative`, `.` and `..` resolved; `None` when it
/// leaves the repository.
fn resolve(base: &Path, relative: &str) -> Option<PathBuf> {
    let mut parts: Vec<String> = base
        .parent()
        .map(|p| {
            p.components()
                .filter_map(|c| match c {
                    Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p.to_string()),
        }
    }
    Some(parts.iter().collect())
}

fn external(target: &str) -> bool {
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|scheme| target.to_ascii_lowercase().starts_with(scheme))
}

/// What is wrong with one link of `doc`, if anything.
fn check_link(
    doc: &Path,
    target: &str,
    cache: &mut BTreeMap<PathBuf, Vec<String>>,
) -> Option<String> {
    if target.is_empty() {
        return Some("empty link target".to_string());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(percent_decoded(a))),
        None => (target, None),
    };
    let file = if path.is_empty() {
        doc.to_path_buf()
    } else {
        let decoded = percent_decoded(path.split('?').next().unwrap_or(path));
        match resolve(doc, &decoded) {
            Some(f) => f,
            None => return Some(format!("`{path}` leads outside the repository")),
        }
    };
    let on_disk = root().join(&file);
    if !on_disk.exists() {
        return Some(format!("{} does not exist", file.display()));
    }
    let anchor = anchor?;
    if on_disk.extension().is_none_or(|x| x != "md") {
        // GitHub's line anchors (`#L10`, `#L10-L20`) on a source file.
        let lines = read(&on_disk).lines().count();
        let line_anchor = anchor.split('-').all(|l| {
            l.strip_prefix('L')
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|n| n >= 1 && n <= lines)
        });
        return (!line_anchor).then(|| {
            format!(
                "#{anchor}: {} is not Markdown and this is not a line anchor within it",
                file.display()
            )
        });
    }
    let known = cache
        .entry(file.clone())
        .or_insert_with(|| anchors(&read(&on_disk)));
    if known.contains(&anchor) {
        return None;
    }
    let near: Vec<&str> = known
        .iter()
        .filter(|a| a.contains(&anchor) || anchor.contains(a.as_str()))
        .map(String::as_str)
        .collect();
    Some(format!(
        "no heading of {} has the anchor #{anchor}{}",
        file.display(),
        if near.is_empty() {
            String::new()
        } else {
            format!(" (close: #{})", near.join(", #"))
        }
    ))
}

#[test]
fn the_readme_is_a_page_a_user_reads() {
    let readme = read(&root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move detail into docs/ and link to it"
    );
    let first_screen: Vec<&str> = readme.lines().take(FIRST_SCREEN_LINES).collect();
    for command in FIRST_SCREEN_COMMANDS {
        assert!(
            first_screen.iter().any(|l| l.contains(command)),
            "README.md:1-{FIRST_SCREEN_LINES}: the first screen no longer shows `{command}`"
        );
    }
}

/// CI runs the README's test command: the line after `.ci/run`'s test section heading.
#[test]
fn ci_runs_the_readme_test_command() {
    let ci = read(&root().join(".ci/run"));
    let mut lines = ci.lines().skip_while(|l| !l.starts_with("section \"test "));
    let heading = lines
        .next()
        .expect(".ci/run has no `section \"test ...\"` line");
    let command = lines.next().unwrap_or_default();
    assert!(
        heading.contains(TEST_COMMAND) && command.starts_with(TEST_COMMAND),
        ".ci/run: the test section should say and run `{TEST_COMMAND}`, the README's test command: \
         {heading:?} then {command:?}"
    );
}

#[test]
fn every_relative_link_in_the_docs_leads_to_a_file_and_a_heading() {
    let docs = documents();
    assert!(
        docs.len() > 1,
        "docs/: no Markdown file found next to README.md ({docs:?})"
    );
    let mut cache = BTreeMap::new();
    let mut checked = 0;
    let mut broken = Vec::new();
    for doc in &docs {
        let text = read(&root().join(doc));
        for link in links(&text) {
            if external(&link.target) {
                continue;
            }
            checked += 1;
            if let Some(why) = check_link(doc, &link.target, &mut cache) {
                broken.push(format!(
                    "{}:{}: broken link ({}): {why}",
                    doc.display(),
                    link.line,
                    link.target
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} broken link(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
    // The parser must have found the README's links into docs/ at least.
    assert!(
        checked >= docs.len(),
        "only {checked} relative link(s) found in {} documents: is the link parser broken?",
        docs.len()
    );
}

#[test]
fn anchors_follow_githubs_rules() {
    for (heading, anchor) in [
        ("The one rule", "the-one-rule"),
        (
            "Trusting your BMC's certificate",
            "trusting-your-bmcs-certificate",
        ),
        (
            "External fence agents (`driver = \"exec\"`)",
            "external-fence-agents-driver--exec",
        ),
        ("The daemon (`nodefence run`)", "the-daemon-nodefence-run"),
        ("7. With NodeHealthCheck", "7-with-nodehealthcheck"),
        ("status_fanout", "status_fanout"),
        ("Fencing topology (`fallback`)", "fencing-topology-fallback"),
        ("See [the guide](docs/x.md) now", "see-the-guide-now"),
    ] {
        assert_eq!(slug(heading), anchor, "slug of {heading:?}");
    }
    let doc = "# Title\n\n## Notes ##\n\n```sh\n# not a heading\n## Notes\n```\n\n## Notes\n\nSetext\n------\n";
    assert_eq!(anchors(doc), ["title", "notes", "notes-1", "setext"]);
}

#[test]
fn links_in_code_are_not_links() {
    let doc = "See [a](a.md#x) and `[b](b.md)`.\n\n```md\n[c](c.md)\n```\n  ```toml\n  x = \"[d](d.md)\"\n  ```\n[e]: e.md\n![f](img/f.png \"title\")\n";
    let found: Vec<(usize, String)> = links(doc).into_iter().map(|l| (l.line, l.target)).collect();
    let expected: Vec<(usize, String)> = [(1, "a.md#x"), (9, "e.md"), (10, "img/f.png")]
        .into_iter()
        .map(|(n, t)| (n, t.to_string()))
        .collect();
    assert_eq!(found, expected);
}
