//! What a conversion reads, opened and checked before the output is created:
//! the source, its own MTP blocks, the draft model, and the plan.
//!
//! Every refusal of the options happens here, so a refused conversion never
//! creates the output (not even its temporary file).

use super::importance::Importance;
use super::options::ConvertOptions;
use crate::plan::{self, Plan};
use crate::policy::Quant;
use crate::{Error, ImatrixProblem, OptionProblem};
use gpack_ingest::{Source, SourceKind, TensorInfo};
use std::path::Path;

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
    /// `--imatrix`: the importance weights, checked against `source`.
    pub imatrix: Option<Importance>,
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
        let mtp_block = take_mtp_blocks(&mut source);
        let imatrix = match &opts.imatrix {
            Some(f) if !matches!(opts.quant, Quant::Mix(_)) => {
                return Err(Error::ImatrixMismatch {
                    file: f.clone(),
                    problem: ImatrixProblem::NeedsMix {
                        quant: opts.quant.name().to_string(),
                    },
                })
            }
            Some(f) => Some(Importance::load(f, &source)?),
            None => None,
        };
        let plan = plan::plan(
            &source,
            opts.quant,
            opts.external_experts,
            opts.allow_requantize,
            imatrix.is_some(),
        )?;
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
            Some(d) => Some(open_draft(d, &source)?),
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
            imatrix,
        })
    }
}

/// A model's own multi-token-prediction blocks, taken out of its tensors.
pub(super) struct MtpBlock {
    /// `{arch}.nextn_predict_layers`.
    pub blocks: u32,
    /// The trunk's layers (the blocks are numbered from it on).
    pub trunk: u32,
    /// The blocks' tensors.
    pub tensors: Vec<TensorInfo>,
}

/// Opens a draft model and checks it can draft for `target`: a model of
/// its own (an architecture) with the target's vocabulary, token for token.
fn open_draft(path: &Path, target: &Source) -> Result<Source, Error> {
    let d = Source::open(path)?;
    let draft = || path.to_path_buf();
    if d.architecture().is_none() {
        return Err(OptionProblem::DraftNotAModel { draft: draft() }.into());
    }
    let (Some(t), Some(dt)) = (
        crate::tokenizer::build(target)?,
        crate::tokenizer::build(&d)?,
    ) else {
        return Err(OptionProblem::DraftWithoutTokenizer { draft: draft() }.into());
    };
    let (t, dt) = (
        gpack_tokenizer::Tokenizer::from_bytes(&t.bytes).map_err(Error::Tokenizer)?,
        gpack_tokenizer::Tokenizer::from_bytes(&dt.bytes).map_err(Error::Tokenizer)?,
    );
    if let Some(id) = t.vocab_difference(&dt) {
        return Err(OptionProblem::DraftVocabulary {
            draft: draft(),
            id,
            draft_token: dt.token_text(id).unwrap_or_default(),
            model_token: t.token_text(id).unwrap_or_default(),
        }
        .into());
    }
    Ok(d)
}

/// Takes the tensors of `source`'s multi-token-prediction blocks out of it
/// (`blk.N.*` for `N` from `block_count - {arch}.nextn_predict_layers` on),
/// or `None` when it has none. The metadata keeps both keys: the runtime
/// finds the blocks' tensors in the Mtp section.
fn take_mtp_blocks(source: &mut Source) -> Option<MtpBlock> {
    let arch = source.architecture()?.to_string();
    let blocks = source
        .metadata
        .get_u32(&format!("{arch}.nextn_predict_layers"))
        .filter(|&n| n > 0)?;
    let trunk = source
        .metadata
        .get_u32(&format!("{arch}.block_count"))?
        .checked_sub(blocks)?;
    let is_mtp = |name: &str| {
        name.strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|l| l.parse::<u32>().ok())
            .is_some_and(|l| l >= trunk)
    };
    let (mtp, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut source.tensors)
        .into_iter()
        .partition(|t| is_mtp(&t.name));
    source.tensors = rest;
    if mtp.is_empty() {
        return None;
    }
    Some(MtpBlock {
        blocks,
        trunk,
        tensors: mtp,
    })
}
