//! Integration tests: the real `gpack serve` binary on the real SmolLM2
//! model, driven over loopback by the `openai` Python client
//! (`openai_client.py`) and by raw sockets (SIGTERM drain, GGUF fallback).
mod batch;
mod serve;
