//! How many sequences run together, how much prompt a step prefills, and how many bytes of KV
//! cache the engine may hold.

use crate::error::{EngineError, Result};
use crate::speculative::Speculation;
use candle_core::Device;

/// Settings as a user gives them; `None` takes the device's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// Sequences decoded together at most (default 8 on the CPU, 32 on a GPU).
    pub max_seqs: Option<usize>,
    /// Prompt tokens run per step in all (default 512).
    pub prefill_chunk: Option<usize>,
    /// MiB all KV caches may hold together (default a quarter of RAM on the CPU, 8 GiB on a
    /// GPU).
    pub kv_cache_mb: Option<usize>,
    /// Requests waiting or running at most; more are refused with [`EngineError::QueueFull`]
    /// (default 1024).
    pub max_waiting: Option<usize>,
    /// Whether decoding sequences draft tokens to verify in one pass (default
    /// [`Speculation::Auto`]); the tokens are the same either way.
    pub speculation: Option<Speculation>,
    /// Rows a decoding step runs at most once drafts are added: every decoding sequence takes
    /// one, drafts what is left, and only as many as raise the step's tokens per second
    /// ([`crate::speculative::budget`]) (default 64 on the CPU, 256 on a GPU). More
    /// sequences than this still decode, without drafts.
    pub max_step_rows: Option<usize>,
}

/// The scheduler's settings, resolved for a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Sequences decoded together at most.
    pub max_seqs: usize,
    /// Prompt tokens run per step in all.
    pub prefill_chunk: usize,
    /// Bytes all KV caches may hold together.
    pub kv_budget_bytes: usize,
    /// Requests waiting or running at most.
    pub max_waiting: usize,
    /// Whether decoding sequences draft tokens to verify in one pass.
    pub speculation: Speculation,
    /// Rows a decoding step fills with drafts at most (see [`SchedulerOptions::max_step_rows`]).
    pub max_step_rows: usize,
}

const MIB: usize = 1 << 20;

impl SchedulerOptions {
    /// The settings for `device`, checked.
    pub fn resolve(&self, device: &Device) -> Result<SchedulerConfig> {
        let cpu = device.is_cpu();
        let config = SchedulerConfig {
            max_seqs: self.max_seqs.unwrap_or(if cpu { 8 } else { 32 }),
            prefill_chunk: self.prefill_chunk.unwrap_or(512),
            kv_budget_bytes: match self.kv_cache_mb {
                Some(mb) => mb.saturating_mul(MIB),
                None if cpu => (total_memory().unwrap_or(16 << 30) / 4).max(256 * MIB),
                None => 8 << 30,
            },
            max_waiting: self.max_waiting.unwrap_or(1024),
            speculation: self.speculation.unwrap_or_default(),
            max_step_rows: self.max_step_rows.unwrap_or(if cpu { 64 } else { 256 }),
        };
        config.check()?;
        Ok(config)
    }
}

impl SchedulerConfig {
    /// Refuses settings that could never serve a request.
    pub fn check(&self) -> Result<()> {
        if self.max_seqs == 0 {
            return Err(EngineError::invalid(
                "max_seqs",
                "0 (at least one sequence must run)",
            ));
        }
        if self.prefill_chunk == 0 {
            return Err(EngineError::invalid(
                "prefill_chunk",
                "0 (must be at least 1)",
            ));
        }
        if self.max_step_rows == 0 {
            return Err(EngineError::invalid(
                "max_step_rows",
                "0 (must be at least 1)",
            ));
        }
        if self.max_waiting == 0 {
            return Err(EngineError::invalid(
                "max_waiting",
                "0 (must be at least 1)",
            ));
        }
        Ok(())
    }

    /// Refuses a budget smaller than the first allocation of one sequence's cache.
    pub fn check_budget(&self, one_sequence_bytes: usize) -> Result<()> {
        if self.kv_budget_bytes < one_sequence_bytes {
            return Err(EngineError::invalid(
                "kv_cache_mb",
                format!(
                    "{:.1} MiB is less than one sequence's first KV cache allocation ({:.1} MiB)",
                    self.kv_budget_bytes as f64 / MIB as f64,
                    one_sequence_bytes as f64 / MIB as f64
                ),
            ));
        }
        Ok(())
    }
}

impl Default for SchedulerConfig {
    /// The CPU's defaults.
    fn default() -> Self {
        SchedulerOptions::default()
            .resolve(&Device::Cpu)
            .expect("the defaults are valid")
    }
}

/// MemTotal of /proc/meminfo, in bytes.
fn total_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_settings_are_refused_by_name() {
        let bad = |o: SchedulerOptions| o.resolve(&Device::Cpu).unwrap_err().to_string();
        let e = bad(SchedulerOptions {
            max_seqs: Some(0),
            ..Default::default()
        });
        assert!(e.contains("max_seqs"), "{e}");
        let e = bad(SchedulerOptions {
            prefill_chunk: Some(0),
            ..Default::default()
        });
        assert!(e.contains("prefill_chunk"), "{e}");
    }

    #[test]
    fn a_budget_below_one_sequence_is_refused() -> Result<()> {
        let c = SchedulerOptions {
            kv_cache_mb: Some(1),
            ..Default::default()
        }
        .resolve(&Device::Cpu)?;
        let e = c.check_budget(6 * MIB).unwrap_err().to_string();
        assert!(e.contains("kv_cache_mb") && e.contains("6.0 MiB"), "{e}");
        c.check_budget(MIB / 2)
    }
}
