//! Arguments every model-loading command shares.

use hearth_engine::{DTypeSpec, DeviceSpec, HubOptions, LoadOptions};

#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// A checkpoint directory or a Hugging Face repo id (owner/name).
    #[arg(short, long)]
    pub model: String,
    /// Hub revision (branch, tag or commit).
    #[arg(long)]
    pub revision: Option<String>,
    /// auto, cpu, cuda, cuda:N or metal.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// auto, f32, bf16 or f16 (auto: bf16 on GPUs, the checkpoint's dtype on the CPU).
    #[arg(long, default_value = "auto")]
    pub dtype: String,
    /// Use only the local Hugging Face cache (also HF_HUB_OFFLINE=1).
    #[arg(long)]
    pub offline: bool,
}

impl ModelArgs {
    pub fn load_options(&self) -> anyhow::Result<LoadOptions> {
        Ok(LoadOptions {
            device: self.device.parse::<DeviceSpec>()?,
            dtype: self.dtype.parse::<DTypeSpec>()?,
            hub: HubOptions {
                revision: self.revision.clone(),
                offline: self.offline,
                cache_dir: None,
                progress: true,
            },
        })
    }
}
