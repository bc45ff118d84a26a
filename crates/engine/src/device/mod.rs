//! Where the model runs and how the process holds memory: device selection
//! (`auto|cpu|cuda[:N]|metal`), weights on huge pages, one allocator arena.

pub mod huge_pages;
pub mod memory;

use crate::error::{EngineError, Result};
use candle_core::Device;
use std::str::FromStr;

/// Where a model runs, as a user names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// CUDA GPU 0 if it opens, else Metal, else the CPU.
    #[default]
    Auto,
    /// The CPU.
    Cpu,
    /// The CUDA GPU of this ordinal.
    Cuda(usize),
    /// The Apple GPU.
    Metal,
}

impl FromStr for DeviceSpec {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            EngineError::invalid(
                "device",
                format!("`{s}`; expected auto, cpu, cuda, cuda:N or metal"),
            )
        };
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            "metal" => Ok(Self::Metal),
            other => match other.strip_prefix("cuda:") {
                Some(n) => n.parse().map(Self::Cuda).map_err(|_| bad()),
                None => Err(bad()),
            },
        }
    }
}

impl DeviceSpec {
    /// Opens the device. `Auto` takes CUDA, else Metal, else the CPU, and logs why.
    pub fn open(self) -> Result<Device> {
        match self {
            Self::Cpu => Ok(Device::Cpu),
            Self::Cuda(ordinal) => {
                if !candle_core::utils::cuda_is_available() {
                    return Err(EngineError::Device(
                        "this build has no CUDA support; rebuild with `cargo run --release --features cuda`"
                            .into(),
                    ));
                }
                Device::new_cuda(ordinal).map_err(|e| {
                    // candle's error carries a backtrace when RUST_BACKTRACE is set: first line only.
                    let e = e.to_string();
                    let first = e.lines().next().unwrap_or_default();
                    EngineError::Device(format!(
                        "cannot open cuda:{ordinal}: {first} (is an NVIDIA driver installed and the GPU visible?)"
                    ))
                })
            }
            Self::Metal => {
                if !candle_core::utils::metal_is_available() {
                    return Err(EngineError::Device(
                        "this build has no Metal support; rebuild with `cargo run --release --features metal`"
                            .into(),
                    ));
                }
                Device::new_metal(0)
                    .map_err(|e| EngineError::Device(format!("cannot open metal: {e}")))
            }
            Self::Auto => {
                if candle_core::utils::cuda_is_available() {
                    match Device::new_cuda(0) {
                        Ok(d) => {
                            tracing::info!("device auto: using cuda:0");
                            return Ok(d);
                        }
                        Err(e) => tracing::info!("device auto: CUDA build but cuda:0 failed ({e})"),
                    }
                } else {
                    tracing::info!("device auto: built without the `cuda` feature");
                }
                if candle_core::utils::metal_is_available() {
                    match Device::new_metal(0) {
                        Ok(d) => {
                            tracing::info!("device auto: using metal");
                            return Ok(d);
                        }
                        Err(e) => tracing::info!("device auto: Metal build but no device ({e})"),
                    }
                }
                tracing::info!("device auto: using the CPU");
                Ok(Device::Cpu)
            }
        }
    }
}

/// A short name for logs and benchmark tables.
pub fn device_name(device: &Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(_) => "cuda".into(),
        Device::Metal(_) => "metal".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_specs() {
        assert_eq!("auto".parse::<DeviceSpec>().unwrap(), DeviceSpec::Auto);
        assert_eq!("CPU".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
        let err = "cuda:x".parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(err.contains("device"), "{err}");
        assert!("tpu".parse::<DeviceSpec>().is_err());
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_feature_says_how_to_rebuild() {
        let err = DeviceSpec::Cuda(0).open().unwrap_err().to_string();
        assert!(err.contains("--features cuda"), "{err}");
    }

    #[test]
    fn auto_falls_back_to_a_device() {
        let dev = DeviceSpec::Auto.open().unwrap();
        if !candle_core::utils::cuda_is_available() && !candle_core::utils::metal_is_available() {
            assert!(dev.is_cpu());
        }
    }
}
