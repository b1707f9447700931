//! Whether a stored tensor's type can be decoded here: the one check the
//! weight stores, the matrices and the PLE table make before reading one
//! (a leaf module, so that they need not use each other for it).

use crate::error::{Error, Result};
use gpack_quant::{GgmlType, NativeView};

/// Refuses a tensor of a ggml type gpack cannot decode (IQ2_XXS, TQ2_0, …):
/// every reader of a weight (kernels, row lookups, norms) decodes it, so
/// binding is where a model with such a tensor fails, with the tensor named,
/// instead of a kernel panicking on the first token.
pub(crate) fn check_decodable(name: &str, ty: GgmlType) -> Result<()> {
    if gpack_quant::ggml::can_dequantize(ty) {
        Ok(())
    } else {
        Err(Error::UnsupportedType {
            name: name.to_string(),
            ty: ty.name(),
        })
    }
}

/// [`check_decodable`] for a native tensor: only a raw ggml layout can hold
/// such a type.
pub(crate) fn check_view_decodable(name: &str, view: &NativeView<'_>) -> Result<()> {
    match view.layout() {
        gpack_quant::Layout::Ggml(t) => check_decodable(name, t),
        _ => Ok(()),
    }
}
