//! A session's KV cache as bytes, so that it outlives the process: the next process that
//! loads the same model restores it and runs only the tokens after the saved ones.
//!
//! The bytes name the model they were computed by (its [`ModelInfo::fingerprint`]: the
//! weight files, the dtype, the KV cache's types, the device and the kernels); restoring them into another model is
//! refused with the reason, never silently wrong. Layout, little-endian:
//!
//! ```text
//! "HEARTHKV" version:u32
//! fingerprint_len:u32 fingerprint (UTF-8)   dtype_len:u32 cache types ("f32", "f16", "bf16",
//!   "q8_0", "q4_0", or "keys/values" where they differ: "f16/q8_0")
//! layers:u32 kv_heads:u32 head_dim:u32 tokens:u64 token ids (u32 each)
//! per layer: keys, then values, each [kv_heads, tokens, row] in their type (a row: head_dim
//!   values, or the bytes of their q8_0/q4_0 blocks)
//! state_layers:u32 conv:u32 delta:u32, then per linear-attention layer conv + delta f32 values
//! ```
//!
//! The recurrent state (a hybrid model's; `state_layers` 0 for the others) came in version 2;
//! version 1 bytes, which end after the layers, are still read.
//!
//! [`ModelInfo::fingerprint`]: crate::loader::ModelInfo::fingerprint

use crate::cache::cache_type::{CacheType, QK};
use crate::cache::recurrent::LayerState;
use crate::error::{EngineError, Result};
use candle_core::{DType, Device, Tensor};

const MAGIC: &[u8; 8] = b"HEARTHKV";
const VERSION: u32 = 2;

/// A cache taken out of (or going into) the scheduler: the tokens it holds and, per layer,
/// keys and values `[1, kv_heads, tokens, head_dim]`.
#[derive(Debug)]
pub struct KvSnapshot {
    /// The [`ModelInfo::fingerprint`](crate::loader::ModelInfo::fingerprint) of the model that
    /// computed it.
    pub fingerprint: String,
    /// The token ids whose keys and values it holds.
    pub tokens: Vec<u32>,
    /// Keys and values of each (attention) layer.
    pub layers: Vec<(Tensor, Tensor)>,
    /// The types keys and values are stored in.
    pub types: (CacheType, CacheType),
    /// The recurrent state of each linear-attention layer after the tokens (hybrid models).
    pub state: Vec<LayerState>,
}

fn bad(message: impl Into<String>) -> EngineError {
    EngineError::invalid("session cache", message.into())
}

fn parse_type(s: &str) -> Result<CacheType> {
    s.parse()
        .map_err(|e: String| bad(format!("unknown cache type {e}")))
}

fn tensor_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let t = t.flatten_all()?;
    Ok(match t.dtype() {
        DType::F32 => bytemuck::cast_slice(&t.to_vec1::<f32>()?).to_vec(),
        DType::F16 => bytemuck::cast_slice(&t.to_vec1::<half::f16>()?).to_vec(),
        DType::BF16 => bytemuck::cast_slice(&t.to_vec1::<half::bf16>()?).to_vec(),
        DType::U8 => t.to_vec1::<u8>()?,
        other => return Err(bad(format!("a cache in {other:?} cannot be saved"))),
    })
}

impl KvSnapshot {
    /// The snapshot as bytes, in the layout that [`crate::cache::snapshot`] describes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let Some((k0, _)) = self.layers.first() else {
            return Err(bad("a cache without layers"));
        };
        let (_, heads, len, row) = k0.dims4()?;
        if len != self.tokens.len() {
            return Err(bad(format!(
                "{len} cached positions for {} tokens",
                self.tokens.len()
            )));
        }
        let (kt, vt) = self.types;
        let head_dim = match kt.is_quantized() {
            true => row / kt.row_len(QK) * QK,
            false => row,
        };
        let dtype = match kt == vt {
            true => kt.name().to_string(),
            false => format!("{}/{}", kt.name(), vt.name()),
        };
        let mut out = Vec::with_capacity(
            64 + self.fingerprint.len()
                + 4 * len
                + self.layers.len()
                    * heads
                    * len
                    * (kt.row_bytes(head_dim) + vt.row_bytes(head_dim)),
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        for s in [self.fingerprint.as_str(), &dtype] {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        for n in [self.layers.len(), heads, head_dim] {
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        out.extend_from_slice(&(len as u64).to_le_bytes());
        for t in &self.tokens {
            out.extend_from_slice(&t.to_le_bytes());
        }
        for (k, v) in &self.layers {
            for (t, ty) in [(k, kt), (v, vt)] {
                if t.dims4()? != (1, heads, len, ty.row_len(head_dim)) || t.dtype() != ty.dtype() {
                    return Err(bad("layers of different shapes"));
                }
                out.extend_from_slice(&tensor_bytes(t)?);
            }
        }
        let (conv, delta) = self
            .state
            .first()
            .map_or((0, 0), |l| (l.conv.len(), l.delta.len()));
        for n in [self.state.len(), conv, delta] {
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        for l in &self.state {
            if (l.conv.len(), l.delta.len()) != (conv, delta) {
                return Err(bad("recurrent states of different sizes"));
            }
            out.extend_from_slice(bytemuck::cast_slice(&l.conv));
            out.extend_from_slice(bytemuck::cast_slice(&l.delta));
        }
        Ok(out)
    }

    /// Reads bytes written by [`KvSnapshot::to_bytes`] onto `device`. Every length is checked
    /// against what is left, so cut or garbage bytes are an error, not a panic.
    pub fn from_bytes(bytes: &[u8], device: &Device) -> Result<Self> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(8)? != MAGIC {
            return Err(bad("not a Hearth KV cache"));
        }
        let version = r.u32()?;
        if version != VERSION && version != 1 {
            return Err(bad(format!(
                "format version {version}; this build reads {VERSION}"
            )));
        }
        let fingerprint = r.string()?;
        let dtypes = r.string()?;
        let (kt, vt) = match dtypes.split_once('/') {
            Some((k, v)) => (parse_type(k)?, parse_type(v)?),
            None => (parse_type(&dtypes)?, parse_type(&dtypes)?),
        };
        let (layers, heads, head_dim) = (r.u32()? as usize, r.u32()? as usize, r.u32()? as usize);
        let len = usize::try_from(r.u64()?).map_err(|_| bad("token count overflows"))?;
        let tokens: Vec<u32> = r
            .take(
                len.checked_mul(4)
                    .ok_or_else(|| bad("token count overflows"))?,
            )?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if [kt, vt].iter().any(|t| t.is_quantized()) && !head_dim.is_multiple_of(QK) {
            return Err(bad(format!("{head_dim} values per head in blocks of {QK}")));
        }
        let one = |ty: CacheType| {
            heads
                .checked_mul(len)
                .and_then(|n| n.checked_mul(ty.row_len(head_dim)))
                .and_then(|n| n.checked_mul(ty.dtype().size_in_bytes()))
                .ok_or_else(|| bad("cache size overflows"))
        };
        let (k_bytes, v_bytes) = (one(kt)?, one(vt)?);
        let shape = |ty: CacheType| [1, heads, len, ty.row_len(head_dim)];
        let mut out = Vec::with_capacity(layers.min(1024));
        for _ in 0..layers {
            let k = Tensor::from_raw_buffer(r.take(k_bytes)?, kt.dtype(), &shape(kt), device)?;
            let v = Tensor::from_raw_buffer(r.take(v_bytes)?, vt.dtype(), &shape(vt), device)?;
            out.push((k, v));
        }
        let mut state = Vec::new();
        if version >= 2 {
            let (n, conv, delta) = (r.u32()? as usize, r.u32()? as usize, r.u32()? as usize);
            let floats = |r: &mut Reader, n: usize| -> Result<Vec<f32>> {
                let b = r.take(
                    n.checked_mul(4)
                        .ok_or_else(|| bad("state size overflows"))?,
                )?;
                Ok(b.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect())
            };
            for _ in 0..n {
                let conv = floats(&mut r, conv)?;
                let delta = floats(&mut r, delta)?;
                state.push(LayerState { conv, delta });
            }
        }
        if r.at != bytes.len() {
            return Err(bad(format!(
                "{} bytes after the last layer",
                bytes.len() - r.at
            )));
        }
        Ok(Self {
            fingerprint,
            tokens,
            layers: out,
            types: (kt, vt),
            state,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                bad(format!(
                    "cut short: {n} bytes wanted at offset {} of {}",
                    self.at,
                    self.bytes.len()
                ))
            })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn string(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| bad("a name that is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(len: usize) -> Result<KvSnapshot> {
        let d = Device::Cpu;
        let layers = (0..3)
            .map(|l| {
                let k = Tensor::arange(0f32, (2 * len * 4) as f32, &d)?
                    .affine(1.0, l as f64)?
                    .reshape((1, 2, len, 4))?;
                Ok((k.clone(), k.affine(-1.0, 0.5)?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvSnapshot {
            fingerprint: "model.gguf; f32".into(),
            tokens: (0..len as u32).collect(),
            layers,
            types: (CacheType::F32, CacheType::F32),
            state: (0..2)
                .map(|l| LayerState {
                    conv: (0..6).map(|i| (i + l) as f32 * 0.5).collect(),
                    delta: (0..8).map(|i| -(i * l) as f32).collect(),
                })
                .collect(),
        })
    }

    #[test]
    fn round_trip_is_exact() -> Result<()> {
        let s = snapshot(5)?;
        let bytes = s.to_bytes()?;
        let back = KvSnapshot::from_bytes(&bytes, &Device::Cpu)?;
        assert_eq!(back.fingerprint, s.fingerprint);
        assert_eq!(back.tokens, s.tokens);
        assert_eq!(back.layers.len(), 3);
        assert_eq!(back.state, s.state);
        for ((a, b), (c, d)) in s.layers.iter().zip(&back.layers) {
            assert_eq!(
                a.squeeze(0)?.to_vec3::<f32>()?,
                c.squeeze(0)?.to_vec3::<f32>()?
            );
            assert_eq!(
                b.squeeze(0)?.to_vec3::<f32>()?,
                d.squeeze(0)?.to_vec3::<f32>()?
            );
        }
        Ok(())
    }

    #[test]
    fn cut_or_garbage_bytes_are_errors() -> Result<()> {
        let bytes = snapshot(4)?.to_bytes()?;
        for cut in [0, 7, 12, 30, bytes.len() / 2, bytes.len() - 1] {
            let err = KvSnapshot::from_bytes(&bytes[..cut], &Device::Cpu)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("session cache"), "cut at {cut}: {err}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(KvSnapshot::from_bytes(&longer, &Device::Cpu).is_err());
        let err = KvSnapshot::from_bytes(b"garbage bytes, no cache at all", &Device::Cpu)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("not a Hearth KV cache"), "{err}");
        // A token count far beyond the bytes present: refused, nothing allocated for it.
        let mut huge = bytes[..8 + 4 + 4 + 15 + 4 + 3 + 12].to_vec();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(KvSnapshot::from_bytes(&huge, &Device::Cpu).is_err());
        Ok(())
    }

    /// Keys and values in types of their own (`--cache-type-k f32 --cache-type-v f16`) come
    /// back in those types, bit for bit.
    #[test]
    fn keys_and_values_keep_their_types() -> Result<()> {
        let mut s = snapshot(4)?;
        for (_, v) in &mut s.layers {
            *v = v.to_dtype(DType::F16)?;
        }
        s.types.1 = CacheType::F16;
        let back = KvSnapshot::from_bytes(&s.to_bytes()?, &Device::Cpu)?;
        for ((k, v), (k2, v2)) in s.layers.iter().zip(&back.layers) {
            assert_eq!((k2.dtype(), v2.dtype()), (DType::F32, DType::F16));
            assert_eq!(
                k.flatten_all()?.to_vec1::<f32>()?,
                k2.flatten_all()?.to_vec1::<f32>()?
            );
            let bits = |t: &Tensor| -> Result<Vec<u16>> {
                Ok(t.flatten_all()?
                    .to_vec1::<half::f16>()?
                    .iter()
                    .map(|x| x.to_bits())
                    .collect())
            };
            assert_eq!(bits(v)?, bits(v2)?);
        }
        Ok(())
    }

    /// Keys in q8_0 blocks and values in q4_0 come back as the same bytes.
    #[test]
    fn quantized_keys_and_values_keep_their_blocks() -> Result<()> {
        let mut s = snapshot(3)?;
        let blocks = |ty: CacheType, seed: u8| -> Result<Tensor> {
            let row = ty.row_len(64);
            let bytes: Vec<u8> = (0..2 * 3 * row)
                .map(|i| (i as u8).wrapping_mul(seed))
                .collect();
            Ok(Tensor::from_vec(bytes, (1, 2, 3, row), &Device::Cpu)?)
        };
        for (k, v) in &mut s.layers {
            (*k, *v) = (blocks(CacheType::Q8_0, 7)?, blocks(CacheType::Q4_0, 13)?);
        }
        s.types = (CacheType::Q8_0, CacheType::Q4_0);
        let bytes = s.to_bytes()?;
        let back = KvSnapshot::from_bytes(&bytes, &Device::Cpu)?;
        assert_eq!(back.types, s.types);
        for ((k, v), (k2, v2)) in s.layers.iter().zip(&back.layers) {
            assert_eq!(k2.dims4()?, (1, 2, 3, 68));
            assert_eq!(v2.dims4()?, (1, 2, 3, 36));
            for (a, b) in [(k, k2), (v, v2)] {
                assert_eq!(
                    a.flatten_all()?.to_vec1::<u8>()?,
                    b.flatten_all()?.to_vec1::<u8>()?
                );
            }
        }
        Ok(())
    }

    #[test]
    fn version_1_bytes_have_no_state() -> Result<()> {
        let mut s = snapshot(3)?;
        s.state.clear();
        let mut bytes = s.to_bytes()?;
        // Version 1 ended after the layers: no state header.
        bytes.truncate(bytes.len() - 12);
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        let back = KvSnapshot::from_bytes(&bytes, &Device::Cpu)?;
        assert!(back.state.is_empty() && back.tokens.len() == 3);
        Ok(())
    }
}
