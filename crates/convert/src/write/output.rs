//! The file being written: the GPACK writer, the report's row of every
//! section written, and the progress callbacks.

use super::options::{ConvertOptions, Progress};
use super::report::SectionReport;
use crate::Error;
use gpack_format::{GpackWriter, SectionKind, SectionWriter, WriteOptions};

/// The output of one conversion, from its creation to the manifest. Every
/// section goes under its kind's default name ([`SectionKind::default_name`]).
pub(super) struct Output<'p> {
    /// The writer (a temporary file until it is finished).
    pub w: GpackWriter,
    /// The sections written so far, in file order.
    pub sections: Vec<SectionReport>,
    /// Told of each streamed section and of its bytes as they are written.
    pub progress: &'p dyn Progress,
}

impl<'p> Output<'p> {
    /// Creates `opts.output` (replacing it only with `opts.force`).
    pub fn create(opts: &ConvertOptions, progress: &'p dyn Progress) -> Result<Self, Error> {
        let w = GpackWriter::create(
            &opts.output,
            WriteOptions {
                replace: opts.force,
            },
        )?;
        Ok(Output {
            w,
            sections: Vec::new(),
            progress,
        })
    }

    /// Records a section of `size` payload bytes holding `items` items.
    pub fn record(&mut self, kind: SectionKind, size: u64, items: u64) {
        self.sections.push(SectionReport {
            kind: kind.spec_name(),
            name: kind.default_name().to_string(),
            size,
            items,
        })
    }

    /// Writes a section built in memory, and records it.
    pub fn add(&mut self, kind: SectionKind, payload: &[u8], items: u64) -> Result<(), Error> {
        self.w
            .add_section(kind, kind.default_name(), payload, items)?;
        self.record(kind, payload.len() as u64, items);
        Ok(())
    }

    /// Starts a streamed section of `bytes` payload bytes, shown to the
    /// progress callbacks as `label`; the caller finishes it and records it.
    pub fn begin(
        &mut self,
        kind: SectionKind,
        label: &str,
        bytes: u64,
    ) -> Result<SectionWriter<'_>, Error> {
        self.progress.section(label, bytes);
        Ok(self.w.begin_section(kind, kind.default_name())?)
    }
}
