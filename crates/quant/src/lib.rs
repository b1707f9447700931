//! gpack-quant: see DESIGN.md. (Work in progress.)

