//! Progress bars: shown on a terminal, never with `--json` or when stdout is
//! not a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A byte-counting bar, hidden unless `visible`.
pub fn bytes_bar(total: u64, message: &str, visible: bool) -> ProgressBar {
    if !visible || !std::io::stdout().is_terminal() {
        return ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg:>10} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    pb.set_message(message.to_string());
    pb
}
