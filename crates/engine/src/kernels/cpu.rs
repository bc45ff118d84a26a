//! The CPU-feature levels the kernels are compiled for: the level detected once, and the
//! default a model takes (lower with `HEARTH_CPU`, or per model through its load options and
//! [`super::KernelContext`]), so that every path can be tested and measured on one machine.
//! Every kernel caps the level it is given at the detected one.

use std::sync::OnceLock;

/// The instruction-set levels the kernels are compiled for, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CpuLevel {
    /// Plain Rust (what the compiler vectorises for the build target).
    Portable = 0,
    /// 64-bit ARM with the dot-product instructions (Apple M1 on, Graviton 2 on, Ampere
    /// Altra): the portable arithmetic with `sdot` for the integer sums.
    Neon = 1,
    /// x86-64 with AVX2, FMA and F16C (Intel Haswell on, AMD Zen 1–3).
    Avx2 = 2,
    /// AVX2 plus AVX-VNNI, the byte dot product on 256-bit vectors (Intel Alder Lake on, the
    /// client CPUs without AVX-512): AVX2's kernels with `vpdpbusd` in the 16-row tiles.
    AvxVnni = 3,
    /// AVX2 plus AVX-512 F, BW, VL and VNNI (Intel Ice Lake / Sapphire Rapids, AMD Zen 4 on).
    Avx512 = 4,
}

/// The accepted `HEARTH_CPU` values, for messages.
pub const LEVEL_NAMES: &str = "portable, neon, avx2, avxvnni, avx512 (or native)";

impl CpuLevel {
    /// Lowest first; a CPU runs the levels whose features it has (x86-64 never runs `neon`,
    /// ARM never `avx2`; an AVX-512 CPU without AVX-VNNI, Ice Lake or Zen 4, skips `avxvnni`).
    pub const ALL: [CpuLevel; 5] = [
        CpuLevel::Portable,
        CpuLevel::Neon,
        CpuLevel::Avx2,
        CpuLevel::AvxVnni,
        CpuLevel::Avx512,
    ];

    /// The level's `HEARTH_CPU` name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Portable => "portable",
            Self::Neon => "neon",
            Self::Avx2 => "avx2",
            Self::AvxVnni => "avxvnni",
            Self::Avx512 => "avx512",
        }
    }

    /// `portable`, `neon`, `avx2`, `avxvnni` or `avx512`; `native` (or `auto`) is the detected level.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "portable" | "scalar" | "generic" => Some(Self::Portable),
            "neon" | "dotprod" => Some(Self::Neon),
            "avx2" => Some(Self::Avx2),
            "avxvnni" | "avx-vnni" => Some(Self::AvxVnni),
            "avx512" | "avx-512" | "avx512vnni" => Some(Self::Avx512),
            "native" | "auto" | "" => Some(detected()),
            _ => None,
        }
    }

    /// The CPU features this level runs on.
    pub fn features(self) -> &'static [&'static str] {
        match self {
            Self::Portable => &[],
            Self::Neon => &["neon", "dotprod"],
            Self::Avx2 => &["avx2", "fma", "f16c"],
            Self::AvxVnni => &["avx2", "fma", "f16c", "avxvnni"],
            Self::Avx512 => &[
                "avx2",
                "fma",
                "f16c",
                "avx512f",
                "avx512bw",
                "avx512vl",
                "avx512vnni",
            ],
        }
    }
}

impl std::fmt::Display for CpuLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn has_feature(name: &str) -> bool {
    match name {
        "avx2" => is_x86_feature_detected!("avx2"),
        "fma" => is_x86_feature_detected!("fma"),
        "f16c" => is_x86_feature_detected!("f16c"),
        "avx512f" => is_x86_feature_detected!("avx512f"),
        "avx512bw" => is_x86_feature_detected!("avx512bw"),
        "avx512vl" => is_x86_feature_detected!("avx512vl"),
        "avx512vnni" => is_x86_feature_detected!("avx512vnni"),
        "avxvnni" => is_x86_feature_detected!("avxvnni"),
        _ => false,
    }
}

#[cfg(target_arch = "aarch64")]
fn has_feature(name: &str) -> bool {
    match name {
        "neon" => std::arch::is_aarch64_feature_detected!("neon"),
        "dotprod" => std::arch::is_aarch64_feature_detected!("dotprod"),
        _ => false,
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn has_feature(_: &str) -> bool {
    false
}

/// The features of `level` this CPU lacks (none: it can run that level).
pub fn missing_features(level: CpuLevel) -> Vec<&'static str> {
    level
        .features()
        .iter()
        .copied()
        .filter(|f| !has_feature(f))
        .collect()
}

/// The highest level this CPU runs.
pub fn detected() -> CpuLevel {
    static DETECTED: OnceLock<CpuLevel> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        CpuLevel::ALL
            .into_iter()
            .rev()
            .find(|&l| missing_features(l).is_empty())
            .unwrap_or(CpuLevel::Portable)
    })
}

/// Every level this CPU runs, lowest first (what the kernel tests compare).
pub fn runnable() -> Vec<CpuLevel> {
    CpuLevel::ALL.into_iter().filter(|&l| runs(l)).collect()
}

/// Whether this CPU runs `level` (detected once: kernel choices ask on every product).
pub fn runs(level: CpuLevel) -> bool {
    static RUNS: OnceLock<[bool; CpuLevel::ALL.len()]> = OnceLock::new();
    RUNS.get_or_init(|| CpuLevel::ALL.map(|l| missing_features(l).is_empty()))[level as usize]
}

/// Why a level cannot be used: an unknown name, or features this CPU lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuLevelError {
    /// Not a level name.
    Unknown(String),
    /// A level whose CPU features are missing.
    Unsupported {
        /// The level asked for.
        level: CpuLevel,
        /// The features this CPU lacks.
        missing: Vec<&'static str>,
    },
}

impl std::fmt::Display for CpuLevelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unknown(s) => write!(f, "unknown CPU level {s:?}; expected {LEVEL_NAMES}"),
            Self::Unsupported { level, missing } => write!(
                f,
                "this CPU cannot run the {level} kernels: it lacks {} (it runs up to {})",
                missing.join(", "),
                detected()
            ),
        }
    }
}

impl std::error::Error for CpuLevelError {}

/// `name` as a level this CPU runs.
pub fn checked(name: &str) -> Result<CpuLevel, CpuLevelError> {
    let level = CpuLevel::parse(name).ok_or_else(|| CpuLevelError::Unknown(name.to_string()))?;
    usable(level)
}

/// `level`, if this CPU runs it; else the error that names what it lacks.
pub fn usable(level: CpuLevel) -> Result<CpuLevel, CpuLevelError> {
    let missing = missing_features(level);
    if missing.is_empty() {
        Ok(level)
    } else {
        Err(CpuLevelError::Unsupported { level, missing })
    }
}

/// The level `HEARTH_CPU` asks for, if set.
pub fn from_env() -> Result<Option<CpuLevel>, CpuLevelError> {
    match std::env::var("HEARTH_CPU") {
        Ok(v) => checked(&v).map(Some),
        Err(_) => Ok(None),
    }
}

/// The level a model runs at unless its load options name one: `HEARTH_CPU` (a value this CPU
/// cannot run is reported when a model loads; here it falls back to the detected level), else
/// the detected one. Each model keeps its level in its [`super::KernelContext`]; nothing here
/// changes it for the process.
pub fn default_level() -> CpuLevel {
    static DEFAULT: OnceLock<CpuLevel> = OnceLock::new();
    *DEFAULT.get_or_init(|| from_env().ok().flatten().unwrap_or_else(detected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_the_cpu_runs_what_it_detects() {
        assert_eq!(CpuLevel::parse("AVX2"), Some(CpuLevel::Avx2));
        assert_eq!(CpuLevel::parse("portable"), Some(CpuLevel::Portable));
        assert_eq!(CpuLevel::parse("native"), Some(detected()));
        assert_eq!(CpuLevel::parse("sse9"), None);
        assert!(matches!(checked("sse9"), Err(CpuLevelError::Unknown(_))));
        for level in CpuLevel::ALL {
            assert_eq!(
                checked(level.name()).is_ok(),
                runnable().contains(&level),
                "{level}"
            );
            assert!(
                !runnable().contains(&level) || level <= detected(),
                "{level}"
            );
        }
        if detected() < CpuLevel::Avx512 {
            let err = checked("avx512").err().map(|e| e.to_string());
            let err = err.unwrap_or_default();
            assert!(err.contains("avx512") && err.contains("lacks"), "{err}");
            assert!(usable(CpuLevel::Avx512).is_err());
        }
        assert_eq!(runnable().first(), Some(&CpuLevel::Portable));
    }
}
