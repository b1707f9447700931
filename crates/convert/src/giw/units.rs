//! The units a bundle is built in, in source order: a tensor, or the
//! members of a fused group (q‖k‖v or gate‖up of one layer) when
//! [`policy::fuses`] says so for a .giw.

use crate::policy::{self, Container, Decision, Member, Quant};
use gpack_ingest::{Source, TensorInfo};
use std::collections::{HashMap, HashSet};

/// Whether `t` is a matrix (more than one row): a native record; any other
/// tensor is a dense record, stored raw.
pub(super) fn is_matrix(t: &TensorInfo) -> bool {
    t.dims.len() >= 2 && t.dims[1..].iter().product::<u64>() > 1
}

/// `(rows, cols)` of a matrix: the product of the dims after the first, and ne0.
pub(super) fn rows_cols(t: &TensorInfo) -> (u64, u64) {
    (t.dims[1..].iter().product(), t.dims[0])
}

/// One unit of work: a tensor, or a fused group's members in row order.
pub(super) enum Unit<'s> {
    Single(usize, &'s TensorInfo),
    Group(String, Vec<(usize, &'s TensorInfo)>),
}

/// The policy's decision for matrix `t` in a .giw.
pub(super) fn decide(t: &TensorInfo, quant: Quant) -> Decision {
    policy::decide(Container::Giw, quant, &t.name, t.ggml_type, t.dims[0])
}

/// The units of `source`, in source order (a group at its first member's
/// place); with `fuse` false, every tensor is its own unit.
pub(super) fn plan_units(source: &Source, quant: Quant, fuse: bool) -> Vec<Unit<'_>> {
    let mut grouped: HashMap<usize, usize> = HashMap::new(); // first member -> unit
    let mut member_of: HashSet<usize> = HashSet::new();
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for idx in source.fusable_groups().into_iter().filter(|_| fuse) {
        let members: Vec<Member<'_>> = idx
            .iter()
            .map(|&i| {
                let t = &source.tensors[i];
                Member {
                    ty: t.ggml_type,
                    dims: &t.dims,
                    layout: is_matrix(t).then(|| decide(t, quant).layout),
                }
            })
            .collect();
        if !policy::fuses(Container::Giw, &members) {
            continue;
        }
        // `blk.L.attn_q.weight`, … → `blk.L.attn_q+attn_k+attn_v`.
        let names: Vec<&str> = idx
            .iter()
            .map(|&i| source.tensors[i].name.as_str())
            .collect();
        let Some(layer) = names[0]
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
        else {
            continue;
        };
        let prefix = format!("blk.{layer}.");
        let parts: Option<Vec<&str>> = names
            .iter()
            .map(|n| n.strip_prefix(prefix.as_str())?.strip_suffix(".weight"))
            .collect();
        let Some(parts) = parts else { continue };
        let min = *idx.iter().min().unwrap_or(&idx[0]);
        grouped.insert(min, groups.len());
        member_of.extend(idx.iter().copied());
        groups.push((format!("{prefix}{}", parts.join("+")), idx));
    }
    let mut units = Vec::new();
    for (i, t) in source.tensors.iter().enumerate() {
        if let Some(&g) = grouped.get(&i) {
            let (name, idx) = &groups[g];
            units.push(Unit::Group(
                name.clone(),
                idx.iter().map(|&j| (j, &source.tensors[j])).collect(),
            ));
        } else if !member_of.contains(&i) {
            units.push(Unit::Single(i, t));
        }
    }
    units
}
