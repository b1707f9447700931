//! Counters, gauges and histograms rendered in the Prometheus text format
//! (version 0.0.4). Hand-rolled: a handful of atomics and two fixed-bucket
//! histograms do not justify a metrics framework.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// A histogram with fixed upper bounds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    inner: Mutex<(Vec<u64>, f64, u64)>,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            inner: Mutex::new((vec![0; bounds.len()], 0.0, 0)),
        }
    }
    /// Records one value.
    pub fn observe(&self, v: f64) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (b, c) in self.bounds.iter().zip(g.0.iter_mut()) {
            if v <= *b {
                *c += 1;
            }
        }
        g.1 += v;
        g.2 += 1;
    }
    fn render(&self, out: &mut String, name: &str, help: &str) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&g.0) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", g.2);
        let _ = writeln!(out, "{name}_sum {}", g.1);
        let _ = writeln!(out, "{name}_count {}", g.2);
    }
}

/// Everything `/metrics` reports.
#[derive(Debug)]
pub struct Metrics {
    /// Chat completion requests received.
    pub chat_requests: AtomicU64,
    /// Completion requests received.
    pub completion_requests: AtomicU64,
    /// Requests answered with an error, by class.
    pub errors_4xx: AtomicU64,
    /// Server-side failures.
    pub errors_5xx: AtomicU64,
    /// Requests turned away because the queue was full (503).
    pub rejected: AtomicU64,
    /// Requests whose client went away before the end.
    pub cancelled: AtomicU64,
    /// Prompt tokens processed.
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens whose keys and values were reused from a slot's cache
    /// (prefill skipped).
    pub prompt_tokens_cached: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Speculative decoding: draft tokens checked.
    pub spec_drafted: AtomicU64,
    /// Speculative decoding: draft tokens accepted.
    pub spec_accepted: AtomicU64,
    /// Requests admitted and waiting for a slot (queued, or being
    /// tokenized).
    pub queue_depth: AtomicU64,
    /// Slots decoding.
    pub active: AtomicU64,
    /// KV positions held by the running sequences.
    pub kv_used: AtomicU64,
    /// KV positions of all slots (slots × context).
    pub kv_total: AtomicU64,
    /// Batched forward steps run.
    pub steps: AtomicU64,
    /// Seconds from the request reaching the engine to its first token.
    pub ttft: Histogram,
    /// Per-request decode speed (tokens after the first / their time).
    pub tps: Histogram,
    /// Where the model runs: set once at start ([`Metrics::set_device`]).
    /// (labels, weight bytes, memory budget, memory planned).
    pub device: std::sync::OnceLock<(String, u64, Option<u64>, u64)>,
    /// The prefix cache's counters, when there is one ([`Metrics::set_prefix`]).
    pub prefix: std::sync::OnceLock<std::sync::Arc<gpack_runtime::kvcache::Stats>>,
    /// Seconds to compute one token's grammar mask (constrained requests;
    /// on the mask thread, beside the forward pass).
    pub mask_seconds: Histogram,
    /// Seconds a step waited for its grammar masks after its forward pass
    /// (the cost constrained requests add to every slot's step).
    pub mask_wait: Histogram,
}

/// Buckets for per-token grammar work: 10 µs to 100 ms.
const MASK_BOUNDS: &[f64] = &[
    1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 1e-1,
];

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            chat_requests: AtomicU64::new(0),
            completion_requests: AtomicU64::new(0),
            errors_4xx: AtomicU64::new(0),
            errors_5xx: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            prompt_tokens_cached: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            spec_drafted: AtomicU64::new(0),
            spec_accepted: AtomicU64::new(0),
            queue_depth: AtomicU64::new(0),
            active: AtomicU64::new(0),
            kv_used: AtomicU64::new(0),
            kv_total: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            ttft: Histogram::new(&[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            tps: Histogram::new(&[
                1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 150.0, 200.0, 300.0, 500.0,
            ]),
            mask_seconds: Histogram::new(MASK_BOUNDS),
            mask_wait: Histogram::new(MASK_BOUNDS),
            device: std::sync::OnceLock::new(),
            prefix: std::sync::OnceLock::new(),
        }
    }
}

/// A Prometheus label value: `\`, `"` and newlines escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Reports the prefix cache's counters from now on.
    pub fn set_prefix(&self, stats: std::sync::Arc<gpack_runtime::kvcache::Stats>) {
        let _ = self.prefix.set(stats);
    }

    /// Records where the model runs (`gpack_device_info`,
    /// `gpack_device_weight_bytes`): the CPU, or the GPU's adapter.
    pub fn set_device(&self, gpu: Option<&gpack_runtime::GpuInfo>) {
        let v = match gpu {
            None => ("{device=\"cpu\"}".to_string(), 0, None, 0),
            Some(g) => (
                format!(
                    "{{device=\"gpu\",adapter=\"{}\",backend=\"{}\",kind=\"{}\",blocks=\"{}\",blocks_total=\"{}\"}}",
                    label(&g.adapter),
                    g.backend,
                    if g.software { "software" } else { "hardware" },
                    g.blocks,
                    g.blocks_total
                ),
                g.weight_bytes,
                g.memory_budget,
                g.memory_planned,
            ),
        };
        let _ = self.device.set(v);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut counter = |name: &str, help: &str, ty: &str, lines: &[(&str, u64)]| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {ty}");
            for (labels, v) in lines {
                let _ = writeln!(s, "{name}{labels} {v}");
            }
        };
        counter(
            "gpack_requests_total",
            "Generation requests received.",
            "counter",
            &[
                ("{endpoint=\"chat\"}", self.chat_requests.load(Relaxed)),
                (
                    "{endpoint=\"completions\"}",
                    self.completion_requests.load(Relaxed),
                ),
            ],
        );
        counter(
            "gpack_request_errors_total",
            "Requests answered with an error.",
            "counter",
            &[
                ("{class=\"4xx\"}", self.errors_4xx.load(Relaxed)),
                ("{class=\"5xx\"}", self.errors_5xx.load(Relaxed)),
                ("{class=\"queue_full\"}", self.rejected.load(Relaxed)),
            ],
        );
        counter(
            "gpack_requests_cancelled_total",
            "Requests whose client disconnected before the end.",
            "counter",
            &[("", self.cancelled.load(Relaxed))],
        );
        if let Some((labels, bytes, budget, planned)) = self.device.get() {
            counter(
                "gpack_device_info",
                "Where the model runs: the CPU, or the GPU adapter (name, backend, kind, blocks on it of blocks_total).",
                "gauge",
                &[(labels, 1)],
            );
            counter(
                "gpack_device_weight_bytes",
                "Device memory the model's weights take on the GPU (0 on the CPU).",
                "gauge",
                &[("", *bytes)],
            );
            counter(
                "gpack_device_memory_planned_bytes",
                "GPU memory the placement was planned to take: weights, f16 KV caches at --ctx for --parallel slots, step buffers (0 on the CPU).",
                "gauge",
                &[("", *planned)],
            );
            if let Some(b) = budget {
                counter(
                    "gpack_device_memory_budget_bytes",
                    "The GPU memory budget the placement was planned against (--gpu-memory).",
                    "gauge",
                    &[("", *b)],
                );
            }
        }
        counter(
            "gpack_prompt_tokens_total",
            "Prompt tokens processed.",
            "counter",
            &[("", self.prompt_tokens.load(Relaxed))],
        );
        counter(
            "gpack_prompt_tokens_cached_total",
            "Prompt tokens reused from a slot's KV cache (prefill skipped).",
            "counter",
            &[("", self.prompt_tokens_cached.load(Relaxed))],
        );
        counter(
            "gpack_generated_tokens_total",
            "Tokens generated.",
            "counter",
            &[("", self.generated_tokens.load(Relaxed))],
        );
        let (drafted, accepted) = (
            self.spec_drafted.load(Relaxed),
            self.spec_accepted.load(Relaxed),
        );
        counter(
            "gpack_spec_drafted_tokens_total",
            "Speculative decoding: draft tokens checked by the model.",
            "counter",
            &[("", drafted)],
        );
        counter(
            "gpack_spec_accepted_tokens_total",
            "Speculative decoding: draft tokens accepted (emitted without a forward of their own).",
            "counter",
            &[("", accepted)],
        );
        counter(
            "gpack_batch_steps_total",
            "Batched forward steps.",
            "counter",
            &[("", self.steps.load(Relaxed))],
        );
        counter(
            "gpack_queue_depth",
            "Requests admitted and waiting for a sequence slot (queued or being tokenized).",
            "gauge",
            &[("", self.queue_depth.load(Relaxed))],
        );
        counter(
            "gpack_active_sequences",
            "Sequence slots decoding.",
            "gauge",
            &[("", self.active.load(Relaxed))],
        );
        counter(
            "gpack_kv_positions_used",
            "KV cache positions held by running sequences.",
            "gauge",
            &[("", self.kv_used.load(Relaxed))],
        );
        counter(
            "gpack_kv_positions_total",
            "KV cache positions of all sequence slots (slots x context).",
            "gauge",
            &[("", self.kv_total.load(Relaxed))],
        );
        if let Some(p) = self.prefix.get() {
            counter(
                "gpack_kv_cache_bytes",
                "Bytes of KV blocks the prefix cache keeps in memory (evictable: not counted in vllm:kv_cache_usage_perc, as vLLM counts cached free blocks as free).",
                "gauge",
                &[("", p.memory_bytes.load(Relaxed))],
            );
            counter(
                "gpack_kv_cache_budget_bytes",
                "The prefix cache's memory budget (--kv-cache-bytes).",
                "gauge",
                &[("", p.memory_budget.load(Relaxed))],
            );
            counter(
                "gpack_kv_cache_blocks_reused_total",
                "KV blocks copied into a sequence from the prefix cache, by where they were found.",
                "counter",
                &[
                    ("{source=\"memory\"}", p.memory_blocks.load(Relaxed)),
                    ("{source=\"disk\"}", p.disk_blocks.load(Relaxed)),
                ],
            );
            counter(
                "gpack_kv_cache_restore_milliseconds_total",
                "Milliseconds spent finding, checking (disk blocks: reading and SHA-256) and copying cached blocks into sequences.",
                "counter",
                &[("", p.restore_nanos.load(Relaxed) / 1_000_000)],
            );
            counter(
                "gpack_kv_cache_disk_rejected_total",
                "Block files of the cache directory refused (another model or settings, truncated, corrupt, not a regular file) and recomputed.",
                "counter",
                &[("", p.disk_rejected.load(Relaxed))],
            );
            counter(
                "gpack_kv_cache_disk_writes_total",
                "Block files written to the cache directory.",
                "counter",
                &[("", p.disk_writes.load(Relaxed))],
            );
            counter(
                "gpack_kv_cache_disk_write_failures_total",
                "Block writes skipped (a full disk, or the writer behind); serving went on.",
                "counter",
                &[("", p.disk_write_failures.load(Relaxed))],
            );
        }
        // The gauges an inference router reads, with vLLM's names and
        // meaning (llm-d's and the Gateway API Inference Extension's
        // endpoint pickers scrape these from any model server).
        let (used, total) = (self.kv_used.load(Relaxed), self.kv_total.load(Relaxed));
        let _ = writeln!(
            s,
            "# HELP vllm:num_requests_waiting Requests waiting to be processed (same as gpack_queue_depth).\n\
             # TYPE vllm:num_requests_waiting gauge\n\
             vllm:num_requests_waiting {}\n\
             # HELP vllm:num_requests_running Requests being decoded (same as gpack_active_sequences).\n\
             # TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running {}\n\
             # HELP vllm:kv_cache_usage_perc KV cache usage, 1 = full: used / total KV positions.\n\
             # TYPE vllm:kv_cache_usage_perc gauge\n\
             vllm:kv_cache_usage_perc {}",
            self.queue_depth.load(Relaxed),
            self.active.load(Relaxed),
            if total == 0 { 0.0 } else { used as f64 / total as f64 }
        );
        // vLLM's prefix-cache counters, in tokens: every prompt token is a
        // query, every one whose keys and values were reused (a slot's own
        // cache or the shared prefix cache) a hit.
        let _ = writeln!(
            s,
            "# HELP vllm:prefix_cache_queries Prompt tokens looked up in the prefix cache.\n\
             # TYPE vllm:prefix_cache_queries counter\n\
             vllm:prefix_cache_queries_total {}\n\
             # HELP vllm:prefix_cache_hits Prompt tokens whose KV was reused from the cache.\n\
             # TYPE vllm:prefix_cache_hits counter\n\
             vllm:prefix_cache_hits_total {}",
            self.prompt_tokens.load(Relaxed),
            self.prompt_tokens_cached.load(Relaxed),
        );
        let _ = writeln!(
            s,
            "# HELP gpack_spec_acceptance_ratio Accepted / drafted tokens since start (0 before any draft).\n\
             # TYPE gpack_spec_acceptance_ratio gauge\n\
             gpack_spec_acceptance_ratio {}",
            if drafted == 0 { 0.0 } else { accepted as f64 / drafted as f64 }
        );
        self.ttft.render(
            &mut s,
            "gpack_time_to_first_token_seconds",
            "Time from admission to the engine to the first generated token.",
        );
        self.tps.render(
            &mut s,
            "gpack_decode_tokens_per_second",
            "Per-request decode speed.",
        );
        self.mask_seconds.render(
            &mut s,
            "gpack_grammar_mask_seconds",
            "Time to compute one token's grammar mask (beside the forward pass).",
        );
        self.mask_wait.render(
            &mut s,
            "gpack_grammar_mask_wait_seconds",
            "Time a batched step waited for its grammar masks after the forward pass.",
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.chat_requests.fetch_add(3, Relaxed);
        m.ttft.observe(0.03);
        m.ttft.observe(7.0);
        let s = m.render();
        assert!(
            s.contains("gpack_requests_total{endpoint=\"chat\"} 3\n"),
            "{s}"
        );
        assert!(s.contains("# TYPE gpack_time_to_first_token_seconds histogram\n"));
        assert!(s.contains("gpack_time_to_first_token_seconds_bucket{le=\"0.05\"} 1\n"));
        assert!(s.contains("gpack_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(s.contains("gpack_time_to_first_token_seconds_count 2\n"));
        assert!(s.contains("# TYPE gpack_queue_depth gauge\n"));
        m.kv_used.store(512, Relaxed);
        m.kv_total.store(2048, Relaxed);
        m.queue_depth.store(3, Relaxed);
        let s = m.render();
        assert!(s.contains("\nvllm:num_requests_waiting 3\n"), "{s}");
        assert!(s.contains("\nvllm:num_requests_running 0\n"), "{s}");
        assert!(s.contains("\nvllm:kv_cache_usage_perc 0.25\n"), "{s}");
        assert!(s.contains("# TYPE vllm:kv_cache_usage_perc gauge\n"), "{s}");
    }
}
