//! The scheduler's model interface on Qwen: each method is the model's own.

use super::Qwen;
use crate::cache::kv::KvCache;
use crate::error::Result;
use crate::generation::LanguageModel;
use crate::vision::ImageInput;
use candle_core::Tensor;

impl LanguageModel for Qwen {
    fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        Qwen::forward(self, tokens, cache)
    }
    fn forward_batch(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Tensor> {
        Qwen::forward_batch(self, tokens, caches)
    }
    fn forward_rows(
        &self,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
    ) -> Result<Tensor> {
        Qwen::forward_rows(self, tokens, lens, caches)
    }
    fn new_cache(&self) -> KvCache {
        Qwen::new_cache(self)
    }
    fn image_token(&self) -> Option<u32> {
        self.vision().map(|v| v.image_token)
    }
    fn image_encoder(&self) -> Option<crate::vision::ImageEncoder> {
        self.vision().map(|v| v.encoder.clone())
    }
    fn attach_images(
        &self,
        prompt: &[u32],
        images: &[ImageInput],
        cache: &mut KvCache,
    ) -> Result<()> {
        Qwen::attach_images(self, prompt, images, cache)
    }
    fn max_positions(&self) -> usize {
        self.config().max_position_embeddings
    }
    fn device(&self) -> candle_core::Device {
        Qwen::device(self).clone()
    }
    fn has_mtp(&self) -> bool {
        Qwen::has_mtp(self)
    }
    fn forward_hidden(&self, tokens: &[u32], cache: &mut KvCache) -> Result<(Tensor, Tensor)> {
        Qwen::forward_hidden(self, tokens, cache)
    }
    fn forward_rows_hidden(
        &self,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
    ) -> Result<(Tensor, Tensor)> {
        Qwen::forward_rows_hidden(self, tokens, lens, caches)
    }
    fn set_draft_vocabulary(&mut self, n: usize) -> Result<bool> {
        Qwen::set_draft_vocabulary(self, n)
    }
    fn draft_rows(
        &self,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
    ) -> Result<(Tensor, Tensor)> {
        Qwen::draft_rows(self, tokens, lens, caches)
    }
    fn head_rows(&self, ids: &[u32]) -> Result<Tensor> {
        Qwen::head_rows(self, ids)
    }
    fn new_mtp_cache(&self) -> KvCache {
        Qwen::new_mtp_cache(self)
    }
    fn mtp_rows(
        &self,
        hidden: &Tensor,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
    ) -> Result<(Tensor, Tensor)> {
        Qwen::mtp_rows(self, hidden, tokens, lens, caches)
    }
}
