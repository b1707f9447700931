//! gpack-server: see DESIGN.md. (Work in progress.)
#![forbid(unsafe_code)]
