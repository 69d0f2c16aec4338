//! Terminal styling for the demo: ANSI colours only on a terminal, and never with
//! `--no-color` or a non-empty `NO_COLOR` environment variable.

/// Paints text, or passes it through unchanged when colour is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    color: bool,
}

impl Style {
    /// Colour on or off, as given.
    pub fn new(color: bool) -> Self {
        Self { color }
    }

    /// Colour when the output is a terminal, unless switched off by flag or `NO_COLOR`.
    pub fn detect(no_color_flag: bool, is_terminal: bool) -> Self {
        let no_color_env = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self::new(is_terminal && !no_color_flag && !no_color_env)
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }

    pub fn red(self, text: &str) -> String {
        self.paint("1;31", text)
    }

    pub fn green(self, text: &str) -> String {
        self.paint("32", text)
    }

    pub fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }

    pub fn blue(self, text: &str) -> String {
        self.paint("34", text)
    }

    pub fn magenta(self, text: &str) -> String {
        self.paint("35", text)
    }

    pub fn cyan(self, text: &str) -> String {
        self.paint("1;36", text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_without_colour() {
        assert_eq!(Style::new(false).red("x"), "x");
        assert_eq!(Style::new(true).red("x"), "\x1b[1;31mx\x1b[0m");
        assert_eq!(Style::detect(true, true), Style::new(false));
        assert_eq!(Style::detect(false, false), Style::new(false));
    }
}
