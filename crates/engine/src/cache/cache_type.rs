//! How the KV cache stores keys and values: llama.cpp's `--cache-type-k` / `--cache-type-v`
//! names. On the CPU the attention kernel reads f32, f16 and bf16 caches in place, widening a
//! tile at a time; f16 halves the cache's bytes and the memory each step reads at depth.

use crate::error::{EngineError, Result};
use candle_core::{DType, Device};
use std::str::FromStr;

/// One cache type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheType {
    /// 32-bit floats: the activations as computed.
    F32,
    /// IEEE half precision: half the bytes, keys and values rounded to 11 bits.
    F16,
    /// bfloat16: half the bytes, f32's range with 8 bits of precision.
    Bf16,
}

impl CacheType {
    /// The accepted names, for messages.
    pub const NAMES: &'static str = "f32, f16 or bf16";

    /// The candle dtype the cache's buffers take.
    pub fn dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::F16 => DType::F16,
            Self::Bf16 => DType::BF16,
        }
    }

    /// The llama.cpp name.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        }
    }

    fn of(dtype: DType) -> Option<Self> {
        match dtype {
            DType::F32 => Some(Self::F32),
            DType::F16 => Some(Self::F16),
            DType::BF16 => Some(Self::Bf16),
            _ => None,
        }
    }
}

impl FromStr for CacheType {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            "bf16" => Ok(Self::Bf16),
            q @ ("q8_0" | "q4_0" | "q4_1" | "q5_0" | "q5_1" | "iq4_nl") => Err(format!(
                "`{q}` (a quantized cache) is not supported yet; expected {}",
                Self::NAMES
            )),
            _ => Err(format!("`{s}`; expected {}", Self::NAMES)),
        }
    }
}

/// The key and value cache types a model is loaded with; `None`: the default (f16 where the
/// CPU kernels run the attention, the activations' dtype elsewhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheTypes {
    /// The keys' type.
    pub k: Option<CacheType>,
    /// The values' type.
    pub v: Option<CacheType>,
}

impl CacheTypes {
    /// The dtypes of keys and values for a model whose activations are `act` on `device`.
    /// Only the CPU kernels (f32 activations on the CPU) read a cache in another dtype than
    /// the activations; elsewhere another type is an error naming the option.
    pub fn resolve(self, act: DType, device: &Device) -> Result<(DType, DType)> {
        let kernels = device.is_cpu() && act == DType::F32;
        let one = |asked: Option<CacheType>, field: &'static str| -> Result<DType> {
            match asked {
                None if kernels => Ok(DType::F16),
                None => Ok(act),
                Some(t) if kernels || t.dtype() == act => Ok(t.dtype()),
                Some(t) => Err(EngineError::invalid(
                    field,
                    format!(
                        "`{}`: on {} with {} activations the cache keeps the activations' \
                         dtype ({}); other cache types are for f32 activations on the CPU",
                        t.name(),
                        if device.is_cpu() { "the CPU" } else { "a GPU" },
                        CacheType::of(act).map_or("these", |a| a.name()),
                        CacheType::of(act).map_or("?", |a| a.name()),
                    ),
                )),
            }
        };
        Ok((one(self.k, "cache_type_k")?, one(self.v, "cache_type_v")?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_quantized_types_are_refused_by_name() {
        assert_eq!("F16".parse::<CacheType>(), Ok(CacheType::F16));
        assert_eq!(" bf16".parse::<CacheType>(), Ok(CacheType::Bf16));
        let q = "q8_0".parse::<CacheType>().unwrap_err();
        assert!(q.contains("q8_0") && q.contains("not supported yet"), "{q}");
        let bad = "f8".parse::<CacheType>().unwrap_err();
        assert!(
            bad.contains("`f8`") && bad.contains("f32, f16 or bf16"),
            "{bad}"
        );
    }

    #[test]
    fn the_cpu_kernels_default_to_f16_and_other_paths_keep_the_activations() -> Result<()> {
        let cpu = Device::Cpu;
        let default = CacheTypes::default();
        assert_eq!(default.resolve(DType::F32, &cpu)?, (DType::F16, DType::F16));
        assert_eq!(
            default.resolve(DType::BF16, &cpu)?,
            (DType::BF16, DType::BF16)
        );
        let mixed = CacheTypes {
            k: Some(CacheType::F32),
            v: Some(CacheType::Bf16),
        };
        assert_eq!(mixed.resolve(DType::F32, &cpu)?, (DType::F32, DType::BF16));
        let err = mixed.resolve(DType::BF16, &cpu).unwrap_err().to_string();
        assert!(
            err.contains("cache_type_k") && err.contains("`f32`"),
            "{err}"
        );
        Ok(())
    }
}
