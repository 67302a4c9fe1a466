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

/// The progress of work in steps, one of which moves bytes: a line on stderr when the step changes (not with
/// `--json`), and `bar` following the bytes of the step `measured`. For `Engine` calls that report
/// `(step, done, total)`.
pub fn step_progress<'a, S: Copy + Eq + 'a>(
    bar: &'a ProgressBar,
    json: bool,
    measured: S,
    step_line: fn(S) -> &'static str,
) -> impl Fn(S, u64, u64) + 'a {
    let last = std::cell::Cell::new(None);
    move |step, done, total| {
        if last.get() != Some(step) {
            last.set(Some(step));
            if !json {
                bar.suspend(|| eprintln!("{}", step_line(step)));
            }
        }
        if step == measured {
            bar.set_length(total);
            bar.set_position(done);
        }
    }
}
