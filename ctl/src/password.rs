//! Reading passwords: from an argument, one line of stdin, or a prompt on
//! the terminal with echo off.

use std::io::{self, BufRead, IsTerminal, Write};

use crate::error::CtlError;

/// Where a new user password comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Given(String),
    /// `--password-stdin`: one line of stdin.
    Stdin,
    /// `--password-file`: the first line of a file.
    File(std::path::PathBuf),
    /// Neither: prompt twice if stdin is a terminal, else read one line.
    Prompt,
}

/// One line of stdin without its line ending.
pub fn read_stdin_line() -> Result<String, CtlError> {
    let mut line = String::new();
    io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| CtlError::Usage(format!("cannot read the password from stdin: {e}")))?;
    if line.ends_with('\n') {
        line.pop();
        if line.ends_with('\r') {
            line.pop();
        }
    }
    Ok(line)
}

/// The first line of a file, without its line ending (a password file).
pub fn read_file_line(path: &std::path::Path) -> Result<String, CtlError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CtlError::Usage(format!("cannot read the password from {}: {e}", path.display())))?;
    let line = text.lines().next().unwrap_or("");
    Ok(line.strip_suffix('\r').unwrap_or(line).to_string())
}

/// Asks `question [y/N]` on the terminal; true for y or yes. Without a
/// terminal it refuses (the caller says to pass --yes).
pub fn confirm(question: &str) -> Result<bool, CtlError> {
    if !stdin_is_terminal() {
        return Ok(false);
    }
    eprint!("{question} [y/N] ");
    let _ = io::stderr().flush();
    let answer = read_stdin_line()?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

/// Restores the terminal's attributes when dropped.
struct EchoOff {
    saved: libc::termios,
}

impl EchoOff {
    fn new() -> Option<EchoOff> {
        // SAFETY: tcgetattr/tcsetattr on fd 0 with a valid termios pointer.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return None;
            }
            let saved = t;
            t.c_lflag &= !libc::ECHO;
            t.c_lflag |= libc::ECHONL;
            if libc::tcsetattr(0, libc::TCSANOW, &t) != 0 {
                return None;
            }
            Some(EchoOff { saved })
        }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        // SAFETY: restores attributes read by tcgetattr on the same fd.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.saved);
        }
    }
}

/// Prompts on stderr and reads a line from the terminal without echo.
pub fn prompt_hidden(prompt: &str) -> Result<String, CtlError> {
    eprint!("{prompt}");
    let _ = io::stderr().flush();
    let guard = EchoOff::new();
    let line = read_stdin_line();
    if guard.is_none() {
        eprintln!();
    }
    drop(guard);
    line
}

pub fn stdin_is_terminal() -> bool {
    io::stdin().is_terminal()
}

/// Resolves a new password from its source.
pub fn read_new_password(source: &Source) -> Result<String, CtlError> {
    match source {
        Source::Given(p) => Ok(p.clone()),
        Source::Stdin => read_stdin_line(),
        Source::File(p) => read_file_line(p),
        Source::Prompt if stdin_is_terminal() => {
            let first = prompt_hidden("New password: ")?;
            let second = prompt_hidden("Retype new password: ")?;
            if first != second {
                return Err(CtlError::Usage("the passwords do not match".into()));
            }
            Ok(first)
        }
        Source::Prompt => read_stdin_line(),
    }
}
