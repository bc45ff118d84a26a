//! A session's cache in and out of the scheduler: a copy for saving, a restore into the pool.

use super::kv_pool::DraftState;
use super::{Scheduler, MIB};
use crate::cache::cache_type::CacheType;
use crate::error::{EngineError, Result};

/// A session's cache outside the scheduler.
pub(crate) struct SessionCache {
    pub session: String,
    pub tokens: Vec<u32>,
    pub layers: Vec<(candle_core::Tensor, candle_core::Tensor)>,
    /// The types keys and values are stored in.
    pub types: (CacheType, CacheType),
    /// A hybrid model's recurrent state after the tokens (empty for others).
    pub state: Vec<crate::cache::recurrent::LayerState>,
}

impl Scheduler {
    pub(super) fn export(&self, id: &str) -> Result<Option<SessionCache>> {
        let Some(e) = self.pool.session_cache(id) else {
            return Ok(None);
        };
        if e.cache.position_bytes() == 0 || e.cache.len() != e.tokens.len() {
            return Ok(None);
        }
        Ok(Some(SessionCache {
            session: id.to_string(),
            tokens: e.tokens.clone(),
            layers: e.cache.layers_copy()?,
            types: e.cache.types().unwrap_or((CacheType::F32, CacheType::F32)),
            state: e
                .cache
                .recurrent()
                .map(|r| r.layers().to_vec())
                .unwrap_or_default(),
        }))
    }

    /// Makes room for the cache under the budget (evicting idle ones) and keeps it for its
    /// session, replacing what the session held.
    pub(super) fn import(&mut self, c: SessionCache) -> Result<usize> {
        if self
            .running
            .iter()
            .chain(&self.preempted)
            .any(|s| s.session() == Some(c.session.as_str()))
        {
            return Err(EngineError::invalid(
                "session cache",
                format!("session `{}` is generating now", c.session),
            ));
        }
        let mut cache = self.model.new_cache();
        if let Some((k, v)) = cache.types().filter(|&t| t != c.types) {
            return Err(EngineError::invalid(
                "session cache",
                format!(
                    "keys and values in {}/{}, where this model's cache keeps {}/{}",
                    c.types.0.name(),
                    c.types.1.name(),
                    k.name(),
                    v.name()
                ),
            ));
        }
        let need = c.tokens.len() * cache.position_bytes() + cache.bytes();
        self.pool.remove(&c.session);
        if !self.make_room(need, None) {
            return Err(EngineError::KvBudget {
                message: format!(
                    "restoring {} cached tokens needs {:.1} MiB; the budget (kv_cache_mb) is {:.0} MiB",
                    c.tokens.len(),
                    need as f64 / MIB,
                    self.config.kv_budget_bytes as f64 / MIB
                ),
            });
        }
        let device = self.model.device();
        let layers = c
            .layers
            .into_iter()
            .map(|(k, v)| Ok((k.to_device(&device)?, v.to_device(&device)?)))
            .collect::<candle_core::Result<Vec<_>>>()?;
        cache
            .restore(layers)
            .map_err(|e| EngineError::invalid("session cache", e.to_string()))?;
        match (cache.recurrent_mut(), c.state.is_empty()) {
            (Some(r), _) => r
                .restore(c.state)
                .map_err(|e| EngineError::invalid("session cache", e.to_string()))?,
            (None, true) => {}
            (None, false) => {
                return Err(EngineError::invalid(
                    "session cache",
                    "it holds a recurrent state, and this model has no linear-attention layers",
                ))
            }
        }
        if cache.len() != c.tokens.len() {
            return Err(EngineError::invalid(
                "session cache",
                format!("{} positions for {} tokens", cache.len(), c.tokens.len()),
            ));
        }
        let n = c.tokens.len();
        self.pool
            .put(Some(c.session), c.tokens, cache, DraftState::default());
        Ok(n)
    }
}
