//! What a conversion reads, opened and checked before the output is created:
//! the source, its own MTP blocks, the draft model, and the plan.
//!
//! Every refusal of the options happens here, so a refused conversion never
//! creates the output (not even its temporary file).

use super::mtp::{self, MtpBlock};
use super::options::ConvertOptions;
use crate::plan::{self, Plan};
use crate::{Error, OptionProblem};
use gpack_ingest::{Source, SourceKind};

/// The inputs of one conversion.
pub(super) struct Input {
    /// The model, without its MTP blocks' tensors.
    pub source: Source,
    /// The model's own multi-token-prediction blocks (for the Mtp section).
    pub mtp_block: Option<MtpBlock>,
    /// `--draft`: a whole draft model with the source's vocabulary.
    pub draft: Option<Source>,
    /// Every tensor of `source` placed, with its layout, offset and size.
    pub plan: Plan,
}

impl Input {
    /// Opens `opts.source` (and `opts.draft`), takes out its MTP blocks and
    /// plans it; refuses options that do not apply to it, or to each other.
    pub fn open(opts: &ConvertOptions) -> Result<Input, Error> {
        if !opts.force && opts.output.exists() {
            return Err(Error::OutputExists(opts.output.clone()));
        }
        let mut source = Source::open(&opts.source)?;
        if opts.external_experts && source.kind != SourceKind::Gguf {
            return Err(OptionProblem::ExternalNeedsGguf.into());
        }
        // The model's own MTP blocks go to the Mtp section, not the trunk's.
        let mtp_block = mtp::take_blocks(&mut source);
        let plan = plan::plan(&source, opts.quant, opts.external_experts)?;
        if opts.draft.is_some() && opts.mtp_dir.is_some() {
            return Err(OptionProblem::DraftAndMtpDir.into());
        }
        if let Some(b) = &mtp_block {
            let option = match (&opts.draft, &opts.mtp_dir) {
                (Some(_), _) => Some("--draft"),
                (None, Some(_)) => Some("--mtp-dir"),
                (None, None) => None,
            };
            if let Some(option) = option {
                return Err(OptionProblem::MtpBlockAndDraft {
                    option,
                    model: opts.source.clone(),
                    blocks: b.blocks,
                    trunk: b.trunk,
                }
                .into());
            }
        }
        let draft = match &opts.draft {
            Some(d) => Some(mtp::open_draft(d, &source)?),
            None => None,
        };
        for f in &source.files {
            f.advise_sequential();
        }
        if opts.external_experts && plan.experts.n_expert == 0 {
            return Err(OptionProblem::ExternalWithoutExperts.into());
        }
        Ok(Input {
            source,
            mtp_block,
            draft,
            plan,
        })
    }
}
