//! The pull of a single-layer (ModelPack) .gpack: parallel HTTP `Range`
//! requests into one preallocated file next to the destination, every
//! section checked against the file's own section table as soon as the
//! bytes up to its end are in, resumable, and renamed into place only after
//! the whole file's SHA-256 equals the layer digest.
//!
//! Why both checks: the section hashes come from the file itself (its
//! table, fetched from the same registry), so alone they prove nothing
//! about a hostile registry; what they give is an early, named failure
//! ("section native_dense is damaged") instead of one digest mismatch at
//! the end. The layer digest, which the manifest (fetched by digest or
//! tag, as the user chose) names, is what proves the bytes.
//!
//! Layout of the work: the file is cut into ranges of `range_size` bytes;
//! `jobs` of them are in flight at once, each written at its offset with
//! `pwrite`. Two verifier threads walk the file in order as the completed
//! prefix grows, reading it back (from the page cache): one into the
//! whole-file hasher, one into the current section's hasher. A journal next to the partial
//! file (`<partial>.ranges`: the range size, then one byte per range, 1 =
//! written) lets an interrupted pull ask only for the missing ranges; the
//! verifier re-reads everything on every run, so nothing in the journal or
//! the partial file is trusted.

use crate::artifact::{self, Plan};
use crate::error::{io, ArtifactProblem, Document, Error, Operation, Result};
use crate::progress::Progress;
use crate::pull::LayerReport;
use crate::registry::Registry;
use futures_util::StreamExt;
use gpack_format::raw::{HeaderV1, FOOTER_SIZE, HEADER_SIZE, SECTION_ENTRY_SIZE};
use oci_client::client::BlobResponse;
use oci_client::manifest::OciDescriptor;
use oci_client::Reference;
use sha2::{Digest, Sha256};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;
use zerocopy::FromBytes;

/// Default bytes per range request.
pub const DEFAULT_RANGE_SIZE: u64 = 16 << 20;
/// Most sections a GPACK v1 file has (one per kind).
const MAX_SECTIONS: u64 = 15;
/// Bytes read back per step by the verifier.
const READ_CHUNK: u64 = 1 << 20;

/// What the caller wants of one ranged pull.
pub(crate) struct Request<'a> {
    pub reg: &'a Registry,
    pub r: &'a Reference,
    pub shown: &'a str,
    pub layer: &'a OciDescriptor,
    pub size: u64,
    /// `dev.gpack.digest`, when the artifact gives it.
    pub footer_annotation: Option<&'a str>,
    /// `-o`, else the store's copy named by the footer digest.
    pub output: Option<PathBuf>,
    pub store: &'a crate::Store,
    pub replace: bool,
    pub jobs: usize,
    pub range_size: u64,
    pub limit: Option<(u64, Instant)>,
    pub progress: Arc<dyn Progress>,
    pub fetched: Arc<AtomicU64>,
}

/// The outcome: where the file is, its plan (footer digest, sections), and
/// the layer's report.
pub(crate) struct Pulled {
    pub output: PathBuf,
    pub plan: Plan,
    pub layer: LayerReport,
}

/// The partial file and journal for `out` and the layer `digest`.
fn partial_paths(out: &Path, digest: &str) -> (PathBuf, PathBuf) {
    let h = digest.trim_start_matches("sha256:");
    let h = &h[..h.len().min(16)];
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = out.parent().unwrap_or(Path::new(""));
    let p = dir.join(format!(".{name}.{h}.partial"));
    let j = dir.join(format!(".{name}.{h}.partial.ranges"));
    (p, j)
}

pub(crate) fn pull(q: Request<'_>) -> Result<Pulled> {
    let id = q.layer.digest.clone();
    let size = q.size;
    let bad = |problem| Error::BadArtifact {
        what: Document::ModelArtifact {
            reference: q.shown.to_string(),
        },
        problem,
    };
    if size < HEADER_SIZE + FOOTER_SIZE {
        return Err(bad(ArtifactProblem::HeaderSize {
            header: HEADER_SIZE + FOOTER_SIZE,
            descriptor: size,
        }));
    }
    // The header, table and footer first (three small ranges): they give
    // the sections to check, and the footer digest that names the file.
    let header = get_range(&q, 0, HEADER_SIZE)?;
    let h = HeaderV1::read_from_bytes(&header).map_err(|_| {
        bad(ArtifactProblem::FieldSize {
            field: "header",
            found: header.len(),
            expected: HEADER_SIZE as usize,
        })
    })?;
    if h.total_file_size.get() != size {
        return Err(bad(ArtifactProblem::HeaderSize {
            header: h.total_file_size.get(),
            descriptor: size,
        }));
    }
    let count = u64::from(h.section_count.get());
    let table_off = h.section_table_offset.get();
    let table_len = count.min(MAX_SECTIONS) * SECTION_ENTRY_SIZE;
    let footer_off = size - FOOTER_SIZE;
    let table = if count == 0
        || count > MAX_SECTIONS
        || table_off
            .checked_add(table_len)
            .is_none_or(|e| e > footer_off)
    {
        Vec::new() // `layout` names what is wrong
    } else {
        get_range(&q, table_off, table_len)?
    };
    let footer = get_range(&q, footer_off, FOOTER_SIZE)?;
    let plan = artifact::layout(q.shown, header, table, footer)?;
    if let Some(a) = q.footer_annotation {
        if a != plan.digest {
            return Err(bad(ArtifactProblem::FooterAnnotation {
                annotation: a.to_string(),
                footer: plan.digest.clone(),
            }));
        }
    }
    let out = match &q.output {
        Some(o) => o.clone(),
        None => q.store.model_path(&plan.digest)?,
    };
    let mut rep = LayerReport {
        section: crate::media::MODELPACK_FILE.into(),
        digest: id.clone(),
        size,
        status: "cached",
        downloaded: 0,
        resumed_from: 0,
    };
    if q.output.is_none() && out.is_file() {
        // Assembled by an earlier pull: quick-check it again.
        gpack_format::Gpack::open(&out)?;
        return Ok(Pulled {
            output: out,
            plan,
            layer: rep,
        });
    }
    if !q.replace && out.exists() {
        return Err(gpack_format::Error::DestinationExists { path: out }.into());
    }
    if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::Store::mkdir(d)?;
    }
    let (partial, journal_path) = partial_paths(&out, &id);
    let file = crate::pull::open_partial(&partial).map_err(|e| {
        if crate::pull::is_symlink_refusal(&e) {
            Error::BadArtifact {
                what: Document::Blob { digest: id.clone() },
                problem: ArtifactProblem::PartialIsSymlink {
                    path: partial.clone(),
                },
            }
        } else {
            io("open", &partial)(e)
        }
    })?;
    if file.try_lock().is_err() {
        return Err(Error::BadArtifact {
            what: Document::Blob { digest: id.clone() },
            problem: ArtifactProblem::Locked {
                path: partial.clone(),
            },
        });
    }
    let range = q.range_size.max(1);
    let n = size.div_ceil(range) as usize;
    let have = file.metadata().map_err(io("stat", &partial))?.len();
    let journal = crate::pull::open_partial(&journal_path).map_err(io("open", &journal_path))?;
    let mut done = read_journal(&journal, range, n);
    if have != size {
        done.iter_mut().for_each(|d| *d = false);
        file.set_len(size).map_err(io("resize", &partial))?;
    }
    write_journal_header(&journal, range, n).map_err(io("write", &journal_path))?;
    for (i, d) in done.iter().enumerate() {
        let b = [u8::from(*d)];
        journal
            .write_all_at(&b, 8 + i as u64)
            .map_err(io("write", &journal_path))?;
    }
    let span = |i: usize| {
        let a = i as u64 * range;
        (a, (a + range).min(size))
    };
    let resumed: u64 = (0..n)
        .filter(|&i| done[i])
        .map(|i| span(i).1 - span(i).0)
        .sum();
    rep.resumed_from = resumed;
    rep.status = if resumed > 0 { "resumed" } else { "downloaded" };
    q.progress.total(size, resumed);
    q.progress.begin(&id, &rep.section, size, resumed);

    let file = Arc::new(file);
    let state = Arc::new(Shared {
        done: Mutex::new(done.clone()),
        cv: Condvar::new(),
        abort: AtomicBool::new(false),
    });
    // The verifier: in file order, as the completed prefix grows.
    let verifier = {
        let (state, file, plan) = (state.clone(), file.clone(), plan.clone());
        let (partial, id) = (partial.clone(), id.clone());
        std::thread::spawn(move || verify(&state, &file, &partial, &plan, &id, range, size))
    };
    let pending: Vec<usize> = (0..n).filter(|&i| !done[i]).collect();
    let downloaded = Arc::new(AtomicU64::new(0));
    let results: Vec<Result<()>> = {
        let tasks = pending.into_iter().map(|i| {
            let (a, b) = span(i);
            let (state, file, journal) = (state.clone(), file.clone(), &journal);
            let (partial, downloaded) = (partial.clone(), downloaded.clone());
            let q = &q;
            let journal_path = &journal_path;
            async move {
                if state.abort.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let r = fetch_range(q, &file, &partial, a, b, &downloaded).await;
                match r {
                    Ok(()) => {
                        journal
                            .write_all_at(&[1], 8 + i as u64)
                            .map_err(io("write", journal_path))?;
                        state.mark(i);
                        Ok(())
                    }
                    Err(e) => {
                        state.stop();
                        Err(e)
                    }
                }
            }
        });
        q.reg.rt.block_on(
            futures_util::stream::iter(tasks)
                .buffer_unordered(q.jobs.max(1))
                .collect::<Vec<_>>(),
        )
    };
    rep.downloaded = downloaded.load(Ordering::Relaxed);
    let download_err = results.into_iter().find_map(|r| r.err());
    if download_err.is_some() {
        state.stop();
    }
    let verified = verifier.join().unwrap_or_else(|_| {
        Err(Error::BadArtifact {
            what: Document::Blob { digest: id.clone() },
            problem: ArtifactProblem::VerifierPanicked,
        })
    });
    // A damaged or forged file goes (a resume would fetch it again anyway);
    // an interrupted download stays for the next pull to resume.
    let discard = || {
        let _ = std::fs::remove_file(&partial);
        let _ = std::fs::remove_file(&journal_path);
    };
    match (verified, download_err) {
        (Err(e), _) if !matches!(e, Error::Io { .. }) && !is_stopped(&e) => {
            discard();
            return Err(e);
        }
        (_, Some(e)) => return Err(e),
        (Err(e), None) => return Err(e),
        (Ok(()), None) => {}
    }
    file.sync_all().map_err(io("fsync", &partial))?;
    // The quick check and the footer digest, on the file as it will be used.
    let g = gpack_format::Gpack::open(&partial);
    let g = match g {
        Ok(g) => g,
        Err(e) => {
            discard();
            return Err(e.into());
        }
    };
    let found = hex::encode(g.layout().digest());
    drop(g);
    if format!("sha256:{found}") != plan.digest {
        discard();
        return Err(Error::FooterMismatch {
            path: partial,
            expected: plan.digest.clone(),
            found,
        });
    }
    gpack_format::publish(&partial, &out, q.replace)?;
    let _ = std::fs::remove_file(&journal_path);
    drop(file);
    q.progress.end(&id);
    Ok(Pulled {
        output: out,
        plan,
        layer: rep,
    })
}

/// Whether `e` is the verifier giving up because a download failed.
fn is_stopped(e: &Error) -> bool {
    matches!(
        e,
        Error::BadArtifact {
            problem: ArtifactProblem::Stopped,
            ..
        }
    )
}

/// The ranges written so far, from a journal written with the same range
/// size and count (anything else: none).
fn read_journal(j: &std::fs::File, range: u64, n: usize) -> Vec<bool> {
    let mut head = [0u8; 8];
    let mut done = vec![false; n];
    let ok = j.read_exact_at(&mut head, 0).is_ok() && u64::from_le_bytes(head) == range;
    let len = j.metadata().map(|m| m.len()).unwrap_or(0);
    if ok && len == 8 + n as u64 {
        let mut b = vec![0u8; n];
        if j.read_exact_at(&mut b, 8).is_ok() {
            for (d, &x) in done.iter_mut().zip(&b) {
                *d = x == 1;
            }
        }
    }
    done
}

fn write_journal_header(j: &std::fs::File, range: u64, n: usize) -> std::io::Result<()> {
    j.set_len(8 + n as u64)?;
    j.write_all_at(&range.to_le_bytes(), 0)
}

/// Ranges written, shared by the downloads and the verifier.
struct Shared {
    done: Mutex<Vec<bool>>,
    cv: Condvar,
    abort: AtomicBool,
}

impl Shared {
    fn mark(&self, i: usize) {
        if let Ok(mut d) = self.done.lock() {
            d[i] = true;
        }
        self.cv.notify_all();
    }

    fn stop(&self) {
        self.abort.store(true, Ordering::Relaxed);
        // Take the lock so a verifier between its check and its wait sees it.
        drop(self.done.lock());
        self.cv.notify_all();
    }

    /// Waits until range `i` is written (false: the pull stopped).
    fn wait(&self, i: usize) -> bool {
        let Ok(mut d) = self.done.lock() else {
            return false;
        };
        loop {
            if d[i] {
                return true;
            }
            if self.abort.load(Ordering::Relaxed) {
                return false;
            }
            d = match self.cv.wait(d) {
                Ok(d) => d,
                Err(_) => return false,
            };
        }
    }
}

/// Reads the file back in order as ranges complete, on two threads (the
/// two SHA-256 chains are the pull's bottleneck on a small machine: one
/// thread for both ran at half the speed): each section's SHA-256 against
/// the table as soon as its last byte is in (stopping the pull at the
/// first bad one), and the whole file's against the layer digest. A
/// damaged section is reported by name even when the whole file's check
/// ends at the same time.
fn verify(
    st: &Shared,
    f: &std::fs::File,
    path: &Path,
    plan: &Plan,
    layer: &str,
    range: u64,
    size: u64,
) -> Result<()> {
    let (sections, whole) = std::thread::scope(|s| {
        let whole = s.spawn(|| verify_whole(st, f, path, layer, range, size));
        let sections = verify_sections(st, f, path, plan, layer, range, size);
        let whole = whole.join().unwrap_or_else(|_| {
            Err(Error::BadArtifact {
                what: Document::Blob {
                    digest: layer.to_string(),
                },
                problem: ArtifactProblem::VerifierPanicked,
            })
        });
        (sections, whole)
    });
    match (sections, whole) {
        (Err(e), _) if !is_stopped(&e) => Err(e),
        (_, Err(e)) => Err(e),
        (Err(e), Ok(())) => Err(e),
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// Calls `each` with the file's bytes in order, chunk by chunk, as the
/// ranges holding them complete; stops (with [`ArtifactProblem::Stopped`])
/// when the pull does, or at `each`'s first error.
fn read_in_order(
    st: &Shared,
    f: &std::fs::File,
    path: &Path,
    layer: &str,
    range: u64,
    size: u64,
    mut each: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut buf = vec![0u8; READ_CHUNK as usize];
    let n = size.div_ceil(range) as usize;
    let fail = |e: Error| {
        st.stop();
        Err(e)
    };
    for i in 0..n {
        if !st.wait(i) {
            return Err(Error::BadArtifact {
                what: Document::Blob {
                    digest: layer.to_string(),
                },
                problem: ArtifactProblem::Stopped,
            });
        }
        let (a, b) = (i as u64 * range, ((i as u64 + 1) * range).min(size));
        let mut p = a;
        while p < b {
            let len = (b - p).min(READ_CHUNK);
            let data = &mut buf[..len as usize];
            if let Err(e) = f.read_exact_at(data, p) {
                return fail(io("read back", path)(e));
            }
            if let Err(e) = each(p, data) {
                return fail(e);
            }
            p += len;
        }
    }
    Ok(())
}

/// The whole file's SHA-256 against the layer digest.
fn verify_whole(
    st: &Shared,
    f: &std::fs::File,
    path: &Path,
    layer: &str,
    range: u64,
    size: u64,
) -> Result<()> {
    let mut whole = Sha256::new();
    read_in_order(st, f, path, layer, range, size, |_, data| {
        whole.update(data);
        Ok(())
    })?;
    let got = hex::encode(whole.finalize());
    if format!("sha256:{got}") != layer {
        st.stop();
        return Err(Error::LayerDigest {
            layer: layer.to_string(),
            size,
            actual: got,
        });
    }
    Ok(())
}

/// Each section's SHA-256 against the table, as soon as its last byte is
/// in.
fn verify_sections(
    st: &Shared,
    f: &std::fs::File,
    path: &Path,
    plan: &Plan,
    layer: &str,
    range: u64,
    size: u64,
) -> Result<()> {
    let mut sec = Sha256::new();
    let mut cur = 0usize;
    let secs = &plan.sections;
    read_in_order(st, f, path, layer, range, size, |p, data| {
        let end = p + data.len() as u64;
        // Feed the sections this piece overlaps; check those it ends.
        while let Some(s) = secs.get(cur) {
            let (so, se) = (s.offset, s.offset + s.size);
            let from = so.max(p);
            if se > end {
                if from < end {
                    sec.update(&data[(from - p) as usize..]);
                }
                break;
            }
            if from < se {
                sec.update(&data[(from - p) as usize..(se - p) as usize]);
            }
            let got = hex::encode(std::mem::take(&mut sec).finalize());
            let want = s.digest.trim_start_matches("sha256:");
            if got != want {
                return Err(Error::SectionDigest {
                    section: s.name.clone(),
                    offset: so,
                    end: se,
                    layer: layer.to_string(),
                    expected: want.to_string(),
                    actual: got,
                });
            }
            cur += 1;
        }
        Ok(())
    })
}

/// One small range into memory (the header, table, footer).
fn get_range(q: &Request<'_>, offset: u64, len: u64) -> Result<Vec<u8>> {
    q.reg.rt.block_on(async {
        let what = Operation::Download {
            section: crate::media::MODELPACK_FILE.into(),
            digest: q.layer.digest.clone(),
        };
        let resp = q
            .reg
            .client
            .pull_blob_stream_partial(q.r, q.layer, offset, Some(len))
            .await
            .map_err(|e| q.reg.err(what, e))?;
        let mut out = Vec::with_capacity(len as usize);
        let (mut stream, mut skip) = match resp {
            BlobResponse::Partial(s) => (s, 0u64),
            BlobResponse::Full(s) => (s, offset),
        };
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| range_io(q, offset, e))?;
            let c = skip_take(&chunk, &mut skip, len - out.len() as u64);
            out.extend_from_slice(c);
            if out.len() as u64 == len {
                break;
            }
        }
        q.fetched.fetch_add(out.len() as u64, Ordering::Relaxed);
        if out.len() as u64 != len {
            return Err(Error::RangeLength {
                layer: q.layer.digest.clone(),
                offset,
                end: offset + len,
                found: out.len() as u64,
            });
        }
        Ok(out)
    })
}

/// The part of `chunk` after `skip` bytes (which it consumes), at most `left` long.
fn skip_take<'c>(chunk: &'c [u8], skip: &mut u64, left: u64) -> &'c [u8] {
    let s = (*skip).min(chunk.len() as u64) as usize;
    *skip -= s as u64;
    let rest = &chunk[s..];
    &rest[..rest.len().min(left as usize)]
}

fn range_io(q: &Request<'_>, offset: u64, e: std::io::Error) -> Error {
    Error::Io {
        op: "download",
        path: PathBuf::from(format!(
            "{} ({}) at {offset}",
            crate::media::MODELPACK_FILE,
            q.layer.digest
        )),
        source: e,
    }
}

/// Downloads `[a, b)` into the partial file at `a`.
async fn fetch_range(
    q: &Request<'_>,
    f: &std::fs::File,
    partial: &Path,
    a: u64,
    b: u64,
    downloaded: &AtomicU64,
) -> Result<()> {
    let what = Operation::Download {
        section: crate::media::MODELPACK_FILE.into(),
        digest: q.layer.digest.clone(),
    };
    let resp = q
        .reg
        .client
        .pull_blob_stream_partial(q.r, q.layer, a, Some(b - a))
        .await
        .map_err(|e| q.reg.err(what, e))?;
    let (mut stream, mut skip) = match resp {
        BlobResponse::Partial(s) => (s, 0u64),
        // The registry ignored the range: read past the bytes before it.
        BlobResponse::Full(s) => (s, a),
    };
    let mut at = a;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            // The client's own digest check at the end of a full response
            // (the range was cut from it already): ours covers the bytes.
            Err(_) if at == b => break,
            Err(e) => return Err(range_io(q, a, e)),
        };
        let rest = skip_take(&chunk, &mut skip, u64::MAX);
        if rest.is_empty() {
            continue;
        }
        // Past the range (a full response): not needed.
        let take = rest.len().min((b - at) as usize);
        f.write_all_at(&rest[..take], at)
            .map_err(io("write", partial))?;
        at += take as u64;
        advance(q, downloaded, take as u64).await;
        if at == b {
            break;
        }
    }
    if at != b {
        return Err(Error::RangeLength {
            layer: q.layer.digest.clone(),
            offset: a,
            end: b,
            found: at - a,
        });
    }
    Ok(())
}

async fn advance(q: &Request<'_>, downloaded: &AtomicU64, n: u64) {
    downloaded.fetch_add(n, Ordering::Relaxed);
    let total = q.fetched.fetch_add(n, Ordering::Relaxed) + n;
    q.progress.advance(&q.layer.digest, n);
    if let Some((rate, t0)) = q.limit {
        let due = std::time::Duration::from_secs_f64(total as f64 / rate as f64);
        let el = t0.elapsed();
        if due > el {
            tokio::time::sleep(due - el).await;
        }
    }
}
