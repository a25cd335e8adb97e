//! Progress of long commands on stderr (stdout keeps only the result, so
//! `duetctl cp -r ... | tee log` stays clean).
//!
//! On a terminal: one line rewritten in place (`\r`, erase to the end of
//! the line) at most every 100 ms, erased at the end. Not a terminal (a
//! pipe, a file, a CI log): a plain line every 10 s at most, so a long run
//! still shows it is alive without filling a log with carriage returns.
//! `--quiet` prints nothing.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    what: &'static str,
    mode: Mode,
    last: Option<Instant>,
    shown: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Quiet,
    Terminal,
    Lines,
}

const TERMINAL_EVERY: Duration = Duration::from_millis(100);
const LINES_EVERY: Duration = Duration::from_secs(10);

impl Progress {
    /// Progress of `what` ("cp", "rm", "fsck") in the mode stderr calls for.
    pub fn new(what: &'static str, quiet: bool) -> Progress {
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Terminal
        } else {
            Mode::Lines
        };
        Progress::with_mode(what, mode)
    }

    pub fn with_mode(what: &'static str, mode: Mode) -> Progress {
        Progress { what, mode, last: None, shown: false }
    }

    /// Whether an update at `now` is shown (the first one waits a period
    /// too: a quick command prints nothing).
    fn due(&mut self, now: Instant) -> bool {
        let every = match self.mode {
            Mode::Quiet => return false,
            Mode::Terminal => TERMINAL_EVERY,
            Mode::Lines => LINES_EVERY,
        };
        match self.last {
            None => {
                self.last = Some(now);
                false
            }
            Some(t) if now.duration_since(t) >= every => {
                self.last = Some(now);
                true
            }
            Some(_) => false,
        }
    }

    /// The text of an update, as written to stderr (for tests).
    pub fn render(&mut self, now: Instant, msg: &str) -> Option<String> {
        if !self.due(now) {
            return None;
        }
        self.shown = true;
        Some(match self.mode {
            Mode::Terminal => format!("\r\x1b[Kduetctl {}: {msg}", self.what),
            _ => format!("duetctl {}: {msg}\n", self.what),
        })
    }

    pub fn update(&mut self, msg: &str) {
        if let Some(s) = self.render(Instant::now(), msg) {
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(s.as_bytes());
            let _ = e.flush();
        }
    }

    /// Erases the terminal line, if one was written.
    pub fn finish(&mut self) {
        if self.mode == Mode::Terminal && self.shown {
            let _ = std::io::stderr().write_all(b"\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_at_most_every_ten_seconds_and_nothing_when_quick() {
        let t = Instant::now();
        let mut p = Progress::with_mode("cp", Mode::Lines);
        assert_eq!(p.render(t, "1 file"), None, "the first update starts the clock");
        assert_eq!(p.render(t + Duration::from_secs(9), "2 files"), None);
        assert_eq!(p.render(t + Duration::from_secs(10), "3 files").as_deref(), Some("duetctl cp: 3 files\n"));
        assert_eq!(p.render(t + Duration::from_secs(15), "4 files"), None);
        let mut q = Progress::with_mode("cp", Mode::Quiet);
        assert_eq!(q.render(t + Duration::from_secs(100), "x"), None);
    }

    #[test]
    fn a_terminal_gets_one_line_rewritten() {
        let t = Instant::now();
        let mut p = Progress::with_mode("rm", Mode::Terminal);
        assert_eq!(p.render(t, "a"), None);
        let s = p.render(t + Duration::from_millis(150), "2 of 9 entries").unwrap();
        assert!(s.starts_with('\r') && !s.contains('\n'), "{s:?}");
        assert!(s.ends_with("duetctl rm: 2 of 9 entries"));
    }
}
