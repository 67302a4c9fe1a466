//! Progress bars for long work: on stderr, hidden when stderr is not a terminal or with --json.

use indicatif::{ProgressBar, ProgressStyle};

/// A byte-progress bar that draws only for people (a terminal, no `--json`).
pub fn bytes_bar(message: &str, json: bool) -> ProgressBar {
    let bar = if json || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>12} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("progress template")
        .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}
