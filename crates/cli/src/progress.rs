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

/// A bar counting `total` items (chunks, …), hidden like [`bytes_bar`].
pub fn items_bar(total: u64, message: &str, visible: bool) -> ProgressBar {
    if !visible || !std::io::stdout().is_terminal() {
        return ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .expect("static template")
            .progress_chars("=> "),
    );
    pb.set_message(message.to_string());
    pb
}

/// Bars of a push or pull: one for the whole transfer and one per layer
/// while it moves (layers under 1 MiB get none), hidden like [`bytes_bar`].
pub struct TransferBars {
    multi: indicatif::MultiProgress,
    total: ProgressBar,
    layers: std::sync::Mutex<std::collections::HashMap<String, ProgressBar>>,
    visible: bool,
}

impl TransferBars {
    /// Bars labelled `what` ("push", "pull").
    pub fn new(what: &str, visible: bool) -> TransferBars {
        let visible = visible && std::io::stdout().is_terminal();
        let multi = if visible {
            indicatif::MultiProgress::new()
        } else {
            indicatif::MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
        };
        let total = multi.add(bytes_bar(0, what, visible));
        TransferBars {
            multi,
            total,
            layers: Default::default(),
            visible,
        }
    }

    /// Removes the bars.
    pub fn finish(&self) {
        self.total.finish_and_clear();
        let _ = self.multi.clear();
    }
}

impl gpack_oci::Progress for TransferBars {
    fn total(&self, bytes: u64, done: u64) {
        self.total.set_length(bytes);
        self.total.set_position(done);
    }
    fn begin(&self, id: &str, label: &str, bytes: u64, done: u64) {
        if !self.visible || bytes < 1 << 20 {
            return;
        }
        let pb = self.multi.add(bytes_bar(bytes, label, true));
        pb.set_position(done);
        self.total.inc(done);
        let mut l = self.layers.lock().unwrap_or_else(|e| e.into_inner());
        l.insert(id.to_string(), pb);
    }
    fn advance(&self, id: &str, bytes: u64) {
        self.total.inc(bytes);
        let l = self.layers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pb) = l.get(id) {
            pb.inc(bytes);
        }
    }
    fn end(&self, id: &str) {
        let mut l = self.layers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pb) = l.remove(id) {
            pb.finish_and_clear();
            self.multi.remove(&pb);
        }
    }
}

/// A bar counting units of work (`perplexity`'s chunks) on stderr, hidden
/// unless `visible` and stderr is a terminal (the report goes to stdout).
pub fn count_bar(unit: &str, visible: bool) -> ProgressBar {
    if !visible || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "[{{bar:40}}] {{pos}}/{{len}} {unit} {{elapsed}} eta {{eta}} {{msg}}"
        ))
        .expect("static template")
        .progress_chars("=> "),
    );
    pb
}
