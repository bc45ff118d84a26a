//! How the KV cache stores keys and values: llama.cpp's `--cache-type-k` / `--cache-type-v`
//! names and block formats. On the CPU the attention kernel reads every type in place,
//! widening a tile at a time; f16 halves the cache's bytes and the memory each step reads at
//! depth, q8_0 (blocks of 32 values: an f16 scale and 32 signed bytes) takes 0.27 of f32's,
//! q4_0 (an f16 scale and 32 four-bit values) 0.14.

use crate::error::{EngineError, Result};
use candle_core::{DType, Device};
use std::str::FromStr;

/// Values per block of the quantized types.
pub const QK: usize = 32;

/// One cache type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheType {
    /// 32-bit floats: the activations as computed.
    F32,
    /// IEEE half precision: half the bytes, keys and values rounded to 11 bits.
    F16,
    /// bfloat16: half the bytes, f32's range with 8 bits of precision.
    Bf16,
    /// llama.cpp's q8_0: per 32 values an f16 scale and 32 signed bytes (34 bytes).
    Q8_0,
    /// llama.cpp's q4_0: per 32 values an f16 scale and 32 four-bit values (18 bytes).
    Q4_0,
}

impl CacheType {
    /// The accepted names, for messages.
    pub const NAMES: &'static str = "f32, f16, bf16, q8_0 or q4_0";

    /// The candle dtype the cache's buffers take (bytes for the quantized types, whose rows
    /// are their blocks).
    pub fn dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::F16 => DType::F16,
            Self::Bf16 => DType::BF16,
            Self::Q8_0 | Self::Q4_0 => DType::U8,
        }
    }

    /// Whether values are stored in blocks of [`QK`] with a scale.
    pub fn is_quantized(self) -> bool {
        matches!(self, Self::Q8_0 | Self::Q4_0)
    }

    /// Elements of [`CacheType::dtype`] one row of `dim` values takes (its last dimension).
    pub fn row_len(self, dim: usize) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::Bf16 => dim,
            Self::Q8_0 => dim / QK * 34,
            Self::Q4_0 => dim / QK * 18,
        }
    }

    /// Bytes one row of `dim` values takes.
    pub fn row_bytes(self, dim: usize) -> usize {
        self.row_len(dim) * self.dtype().size_in_bytes()
    }

    /// The llama.cpp name.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
        }
    }

    /// The float type that stores `dtype` as it is.
    pub(crate) fn of(dtype: DType) -> Option<Self> {
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
            "q8_0" => Ok(Self::Q8_0),
            "q4_0" => Ok(Self::Q4_0),
            q @ ("q4_1" | "q5_0" | "q5_1" | "iq4_nl") => Err(format!(
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
    /// The types of keys and values for a model whose activations are `act` on `device`, with
    /// `head_dim` values per head. Only the CPU kernels (f32 activations on the CPU) read a
    /// cache in another type than the activations; elsewhere another type is an error naming
    /// the option, as is a quantized type for heads that are not whole blocks.
    pub fn resolve(
        self,
        act: DType,
        device: &Device,
        head_dim: usize,
    ) -> Result<(CacheType, CacheType)> {
        let kernels = device.is_cpu() && act == DType::F32;
        let as_act = CacheType::of(act).unwrap_or(CacheType::F32);
        let one = |asked: Option<CacheType>, field: &'static str| -> Result<CacheType> {
            match asked {
                None if kernels => Ok(CacheType::F16),
                None => Ok(as_act),
                Some(t) if t.is_quantized() && !head_dim.is_multiple_of(QK) => {
                    Err(EngineError::invalid(
                        field,
                        format!(
                            "`{}` stores blocks of {QK} values; this model's heads have {head_dim}",
                            t.name()
                        ),
                    ))
                }
                Some(t) if kernels || t.dtype() == act => Ok(t),
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
        assert_eq!("q8_0".parse::<CacheType>(), Ok(CacheType::Q8_0));
        assert_eq!("Q4_0".parse::<CacheType>(), Ok(CacheType::Q4_0));
        let q = "q5_1".parse::<CacheType>().unwrap_err();
        assert!(q.contains("q5_1") && q.contains("not supported yet"), "{q}");
        let bad = "f8".parse::<CacheType>().unwrap_err();
        assert!(
            bad.contains("`f8`") && bad.contains("f32, f16, bf16, q8_0 or q4_0"),
            "{bad}"
        );
        assert_eq!(
            (
                CacheType::Q8_0.row_bytes(128),
                CacheType::Q4_0.row_bytes(64)
            ),
            (136, 36)
        );
    }

    #[test]
    fn the_cpu_kernels_default_to_f16_and_other_paths_keep_the_activations() -> Result<()> {
        let cpu = Device::Cpu;
        let default = CacheTypes::default();
        use CacheType::*;
        let default = default.resolve(DType::F32, &cpu, 64)?;
        assert_eq!(default, (F16, F16));
        assert_eq!(
            CacheTypes::default().resolve(DType::BF16, &cpu, 64)?,
            (Bf16, Bf16)
        );
        let mixed = CacheTypes {
            k: Some(F32),
            v: Some(Bf16),
        };
        assert_eq!(mixed.resolve(DType::F32, &cpu, 64)?, (F32, Bf16));
        let err = mixed
            .resolve(DType::BF16, &cpu, 64)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cache_type_k") && err.contains("`f32`"),
            "{err}"
        );
        let q8 = CacheTypes {
            k: Some(Q8_0),
            v: Some(Q4_0),
        };
        assert_eq!(q8.resolve(DType::F32, &cpu, 128)?, (Q8_0, Q4_0));
        let err = q8.resolve(DType::F32, &cpu, 80).unwrap_err().to_string();
        assert!(err.contains("cache_type_k") && err.contains("80"), "{err}");
        let err = q8.resolve(DType::BF16, &cpu, 128).unwrap_err().to_string();
        assert!(err.contains("`q8_0`"), "{err}");
        Ok(())
    }
}
