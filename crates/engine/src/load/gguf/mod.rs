//! GGUF files (llama.cpp's format) as whole models: the Qwen configuration, the tokenizer and
//! the chat template come from the metadata, the weights stay in their quantized blocks. This
//! file opens the container and reads its metadata; `config.rs` makes the Qwen configuration
//! of it, `tokenizer.rs` the tokenizer and chat template, `names.rs` maps Hugging Face tensor
//! names to llama.cpp's, and `weights.rs` reads the tensors.

mod config;
mod names;
mod tokenizer;
mod weights;

pub use names::gguf_name;
pub use weights::GgufWeights;

use crate::error::{EngineError, Result};
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value};
use candle_core::quantized::GgmlDType;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// An open GGUF file: its metadata and tensor index, with the tensor data read on demand.
pub struct GgufFile {
    path: PathBuf,
    content: Content,
    reader: Mutex<BufReader<File>>,
    /// The special tokens' names, kept when the vocabulary's metadata is dropped.
    special: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Block types the engine computes with (llama.cpp's names).
const SUPPORTED: &[GgmlDType] = &[
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

impl GgufFile {
    /// Opens a GGUF file and reads its header, metadata and tensor index.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => EngineError::MissingFile {
                what: "GGUF file",
                path: path.into(),
            },
            _ => EngineError::io(path, e),
        })?;
        let mut magic = [0u8; 4];
        {
            use std::io::Read;
            let mut f = &file;
            if f.read_exact(&mut magic).is_err() || &magic != b"GGUF" {
                return Err(EngineError::Gguf {
                    path: path.into(),
                    message: format!(
                        "not a GGUF file (magic {:?}, expected \"GGUF\")",
                        String::from_utf8_lossy(&magic)
                    ),
                });
            }
        }
        let mut reader = BufReader::new(file);
        std::io::Seek::rewind(&mut reader).map_err(|e| EngineError::io(path, e))?;
        // candle's reader panics on some malformed headers (a `general.alignment` of 0
        // divides by zero); such a file is an error naming it, not a crash.
        let read =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Content::read(&mut reader)));
        let content = match read {
            Ok(r) => r.map_err(|e| EngineError::Gguf {
                path: path.into(),
                message: first_line(&e),
            })?,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                return Err(EngineError::Gguf {
                    path: path.into(),
                    message: format!("malformed header or metadata ({what})"),
                });
            }
        };
        let me = Self {
            path: path.into(),
            content,
            reader: Mutex::new(reader),
            special: None,
        };
        me.check_tensors()?;
        Ok(me)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's one reader (tensors are read one at a time).
    fn reader(&self) -> Result<std::sync::MutexGuard<'_, BufReader<File>>> {
        self.reader.lock().map_err(|_| self.err("reader poisoned"))
    }

    /// An error reading tensor `name`, naming the file and the tensor.
    fn tensor_err(&self, name: &str, e: &candle_core::Error) -> EngineError {
        self.err(format!("tensor `{name}`: {}", first_line(e)))
    }

    fn err(&self, message: impl Into<String>) -> EngineError {
        EngineError::Gguf {
            path: self.path.clone(),
            message: message.into(),
        }
    }

    /// Every tensor: a supported type, whole blocks, and data inside the file (sizes and
    /// offsets summed with checks: a file that declares more than fits in 64 bits is refused).
    fn check_tensors(&self) -> Result<()> {
        let len = std::fs::metadata(&self.path)
            .map_err(|e| EngineError::io(&self.path, e))?
            .len();
        for (name, info) in &self.content.tensor_infos {
            if !SUPPORTED.contains(&info.ggml_dtype) {
                return Err(self.err(format!(
                    "tensor `{name}` has unsupported type {:?}",
                    info.ggml_dtype
                )));
            }
            let bytes =
                tensor_bytes(info).map_err(|e| self.err(format!("tensor `{name}`: {e}")))?;
            let end = self
                .content
                .tensor_data_offset
                .checked_add(info.offset)
                .and_then(|start| start.checked_add(bytes))
                .ok_or_else(|| {
                    self.err(format!(
                        "tensor `{name}`: its offset {} and size {bytes} bytes overflow 64 bits",
                        info.offset
                    ))
                })?;
            if end > len {
                return Err(self.err(format!(
                    "truncated: tensor `{name}` ends at byte {end}, the file has {len}"
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn meta(&self, key: &str) -> Result<&Value> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| self.err(format!("metadata key `{key}` is missing")))
    }

    pub(crate) fn meta_u32(&self, key: &str) -> Result<u32> {
        let v = self.meta(key)?;
        v.to_u32()
            .or_else(|_| v.to_u64().map(|n| n as u32))
            .or_else(|_| v.to_i32().map(|n| n as u32))
            .map_err(|_| self.err(format!("metadata key `{key}` is not an integer")))
    }

    pub(crate) fn meta_f32(&self, key: &str) -> Result<f32> {
        self.meta(key)?
            .to_f32()
            .map_err(|_| self.err(format!("metadata key `{key}` is not a float")))
    }

    pub(crate) fn meta_str(&self, key: &str) -> Result<&str> {
        self.meta(key)?
            .to_string()
            .map(String::as_str)
            .map_err(|_| self.err(format!("metadata key `{key}` is not a string")))
    }

    fn meta_strings(&self, key: &str) -> Result<Vec<&str>> {
        let items = self
            .meta(key)?
            .to_vec()
            .map_err(|_| self.err(format!("metadata key `{key}` is not a list")))?;
        items
            .iter()
            .map(|v| {
                v.to_string()
                    .map(String::as_str)
                    .map_err(|_| self.err(format!("`{key}` holds a non-string")))
            })
            .collect()
    }

    /// `general.architecture` (`qwen2`, `qwen3`, `qwen3moe`).
    pub fn architecture(&self) -> Result<&str> {
        self.meta_str("general.architecture")
    }

    /// A count that must be positive (a layer, head or vocabulary count).
    pub(crate) fn meta_count(&self, key: &str) -> Result<usize> {
        match self.meta_u32(key)? {
            0 => Err(self.err(format!("metadata key `{key}` is 0"))),
            n => Ok(n as usize),
        }
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.content.metadata.contains_key(key)
    }

    /// The block holding the multi-token-prediction head, where the file has one: llama.cpp
    /// stores it after the model's own blocks (`{arch}.nextn_predict_layers` of them).
    fn mtp_block(&self) -> Option<usize> {
        let arch = self.architecture().ok()?;
        let mtp = self
            .meta_u32(&format!("{arch}.nextn_predict_layers"))
            .ok()? as usize;
        let blocks = self.meta_u32(&format!("{arch}.block_count")).ok()? as usize;
        (mtp > 0).then(|| blocks.checked_sub(mtp)).flatten()
    }

    /// The quantization most matrices use, as llama.cpp names file types (`Q4_K_M` files hold
    /// several block types; the name is what `general.file_type` says).
    pub fn file_type(&self) -> String {
        let names = [
            (0, "F32"),
            (1, "F16"),
            (2, "Q4_0"),
            (3, "Q4_1"),
            (7, "Q8_0"),
            (8, "Q5_0"),
            (9, "Q5_1"),
            (10, "Q2_K"),
            (11, "Q3_K_S"),
            (12, "Q3_K_M"),
            (13, "Q3_K_L"),
            (14, "Q4_K_S"),
            (15, "Q4_K_M"),
            (16, "Q5_K_S"),
            (17, "Q5_K_M"),
            (18, "Q6_K"),
            (32, "BF16"),
        ];
        match self.meta_u32("general.file_type") {
            Ok(t) => names
                .iter()
                .find(|(n, _)| *n == t)
                .map(|(_, s)| (*s).to_string())
                .unwrap_or_else(|| format!("type{t}")),
            Err(_) => "gguf".into(),
        }
    }

    /// Bytes of tensor data (for sizes in benchmark tables).
    pub fn weight_bytes(&self) -> usize {
        self.content
            .tensor_infos
            .values()
            .map(|i| tensor_bytes(i).unwrap_or(u64::MAX))
            .fold(0u64, u64::saturating_add)
            .try_into()
            .unwrap_or(usize::MAX)
    }
}

/// Bytes of a tensor's data, or why its shape cannot be stored: more elements than 64 bits
/// count, or not a whole number of blocks.
fn tensor_bytes(info: &TensorInfo) -> std::result::Result<u64, String> {
    let dims = info.shape.dims();
    let elems = dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
        .ok_or_else(|| format!("shape {dims:?} has more elements than 64 bits count"))?;
    let block = info.ggml_dtype.block_size() as u64;
    if elems % block != 0 {
        return Err(format!(
            "{elems} elements do not fill whole {:?} blocks of {block}",
            info.ggml_dtype
        ));
    }
    (elems / block)
        .checked_mul(info.ggml_dtype.type_size() as u64)
        .filter(|&b| usize::try_from(b).is_ok())
        .ok_or_else(|| format!("shape {dims:?} needs more bytes than 64 bits count"))
}

fn first_line(e: &candle_core::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}
