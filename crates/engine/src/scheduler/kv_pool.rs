//! The caches of sequences that are not running: sessions kept between requests, and finished
//! anonymous requests kept for their prompt prefix. All caches together — these and the
//! running sequences' — stay under a byte budget; idle ones are evicted least recently used.

use crate::cache::kv::KvCache;
use crate::cache::multimodal::prefix_keys;
use crate::speculative::draft_model::DraftCache;
use crate::speculative::mtp::MtpState;

/// A prompt must share at least this many tokens with a cached sequence to be seeded from it
/// (below that, copying the rows costs about what running them does).
pub const MIN_SHARED_PREFIX: usize = 16;

pub(crate) struct Entry {
    /// The session's name; `None` for a finished request that named none.
    pub session: Option<String>,
    /// The session that left this cache when it was released (for saving it afterwards).
    pub released_by: Option<String>,
    /// The tokens whose keys and values `cache` holds, in order.
    pub tokens: Vec<u32>,
    /// `tokens` as prefixes are matched ([`prefix_keys`]: each image by its pixels).
    pub keys: Vec<u32>,
    pub cache: KvCache,
    /// Its state in the draft source, kept so that a prompt that starts with these tokens
    /// does not run them through the draft model or the prediction head again.
    pub draft: DraftState,
    last_used: u64,
}

/// A sequence's state in its draft source, kept beside its cache.
#[derive(Default)]
pub(crate) struct DraftState {
    /// Its cache in the draft model.
    pub model: Option<DraftCache>,
    /// Its state in the multi-token-prediction head.
    pub mtp: Option<MtpState>,
}

impl DraftState {
    pub fn bytes(&self) -> usize {
        self.model.as_ref().map_or(0, DraftCache::bytes)
            + self.mtp.as_ref().map_or(0, MtpState::bytes)
    }

    /// Forgets the head's positions from `len` on (the draft model cuts its own cache to what
    /// it shares with the context when it drafts).
    pub fn truncate(&mut self, len: usize) {
        if let Some(m) = &mut self.mtp {
            if m.truncate(len).is_err() {
                self.mtp = None;
            }
        }
    }
}

/// Where a new sequence's cache comes from.
pub(crate) struct Seed {
    pub cache: KvCache,
    pub tokens: Vec<u32>,
    /// Its state in the draft source, where the source had one.
    pub draft: DraftState,
}

#[derive(Default)]
pub(crate) struct KvPool {
    entries: Vec<Entry>,
    clock: u64,
    /// The token that stands for an image's tokens, where the model sees images.
    image_token: Option<u32>,
}

/// Tokens `a` and `b` share at their start.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl KvPool {
    /// An empty pool for a model whose prompts hold images as runs of `image_token`.
    pub fn new(image_token: Option<u32>) -> Self {
        Self {
            image_token,
            ..Self::default()
        }
    }

    /// How `tokens`, held by `cache`, are matched as a prefix.
    pub fn keys(&self, tokens: &[u32], cache: &KvCache) -> Vec<u32> {
        let images = cache.multimodal().map(|m| m.keys()).unwrap_or_default();
        prefix_keys(tokens, self.image_token, &images)
    }

    /// Bytes the idle caches alone hold (the segments they share are counted apart).
    pub fn bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|e| e.cache.bytes() + e.draft.bytes())
            .sum()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The idle caches.
    pub fn caches(&self) -> impl Iterator<Item = &KvCache> {
        self.entries.iter().map(|e| &e.cache)
    }

    #[cfg(test)]
    pub fn has_session(&self, id: &str) -> bool {
        self.entries
            .iter()
            .any(|e| e.session.as_deref() == Some(id))
    }

    /// Keeps a cache that a sequence leaves behind. A session replaces its earlier entry. An
    /// anonymous cache whose tokens another anonymous one already starts with adds nothing and
    /// is dropped; one that extends others replaces them (many requests of one prompt, or
    /// clients that leave one after another, keep one cache, not one each).
    pub fn put(
        &mut self,
        session: Option<String>,
        tokens: Vec<u32>,
        cache: KvCache,
        draft: DraftState,
    ) {
        if tokens.is_empty() {
            return;
        }
        let keys = self.keys(&tokens, &cache);
        match &session {
            Some(id) => {
                self.remove(id);
            }
            None => {
                let anonymous = |e: &Entry| e.session.is_none() && e.released_by.is_none();
                // Held already where another cache holds these tokens (and images) and can
                // resume after them (a recurrent state only at its checkpoints).
                let whole = keys.len() == tokens.len();
                let holds = |e: &Entry, k: &[u32]| {
                    e.keys.starts_with(k) && e.cache.resumable(k.len()) == k.len()
                };
                if let Some(i) = self
                    .entries
                    .iter()
                    .position(|e| whole && anonymous(e) && holds(e, &keys))
                {
                    self.touch(i);
                    return;
                }
                self.entries.retain(|e| {
                    !(anonymous(e)
                        && e.keys.len() == e.tokens.len()
                        && keys.starts_with(&e.keys)
                        && cache.resumable(e.keys.len()) == e.keys.len())
                });
            }
        }
        self.clock += 1;
        self.entries.push(Entry {
            session,
            released_by: None,
            tokens,
            keys,
            cache,
            draft,
            last_used: self.clock,
        });
    }

    /// Forgets a session's cache; whether it was here.
    pub fn remove(&mut self, id: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.session.as_deref() != Some(id));
        self.entries.len() != before
    }

    /// Unnames a session's entry: it stays for prompts with its prefix until evicted.
    pub fn release(&mut self, id: &str) {
        for e in &mut self.entries {
            if e.session.as_deref() == Some(id) {
                e.released_by = e.session.take();
            } else if e.released_by.as_deref() == Some(id) {
                e.released_by = None;
            }
        }
    }

    /// Takes the session's own entry out of the pool.
    pub fn take_session(&mut self, id: &str) -> Option<Entry> {
        let i = self
            .entries
            .iter()
            .position(|e| e.session.as_deref() == Some(id))?;
        Some(self.entries.swap_remove(i))
    }

    /// The cache a session holds, or the last one it released if still here.
    pub fn session_cache(&self, id: &str) -> Option<&Entry> {
        let own = self
            .entries
            .iter()
            .find(|e| e.session.as_deref() == Some(id));
        own.or_else(|| {
            self.entries
                .iter()
                .filter(|e| e.released_by.as_deref() == Some(id))
                .max_by_key(|e| e.last_used)
        })
    }

    /// The entry sharing the longest prefix with a prompt of `keys` ([`Self::keys`]) that its
    /// cache can resume from (at least [`MIN_SHARED_PREFIX`]), and that length.
    pub fn longest_prefix(&self, keys: &[u32]) -> Option<(usize, usize)> {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, e.cache.resumable(common_prefix(&e.keys, keys))))
            .filter(|&(_, n)| n >= MIN_SHARED_PREFIX)
            .max_by_key(|&(i, n)| (n, self.entries[i].last_used))
    }

    pub fn entry(&self, i: usize) -> &Entry {
        &self.entries[i]
    }

    /// Takes entry `i` out of the pool.
    pub fn take(&mut self, i: usize) -> Entry {
        self.entries.swap_remove(i)
    }

    /// Marks entry `i` used now.
    pub fn touch(&mut self, i: usize) {
        self.clock += 1;
        self.entries[i].last_used = self.clock;
    }

    /// Evicts the least recently used entry other than `keep`'s session; what it freed.
    pub fn evict_one(&mut self, keep: Option<&str>) -> Option<Entry> {
        let i = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| keep.is_none() || e.session.as_deref() != keep)
            .min_by_key(|(_, e)| e.last_used)
            .map(|(i, _)| i)?;
        Some(self.entries.swap_remove(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(len: usize) -> KvCache {
        let mut c = KvCache::new(1, 4096).with_position_bytes(10);
        c.advance(len);
        c
    }

    #[test]
    fn longest_prefix_needs_enough_shared_tokens() {
        let mut pool = KvPool::default();
        let a: Vec<u32> = (0..40).collect();
        let mut b: Vec<u32> = (0..20).collect();
        b.extend(100..120);
        pool.put(
            Some("a".into()),
            a.clone(),
            cache(40),
            DraftState::default(),
        );
        pool.put(None, b, cache(40), DraftState::default());
        let mut prompt: Vec<u32> = (0..30).collect();
        prompt.push(7);
        assert_eq!(pool.longest_prefix(&prompt), Some((0, 30)));
        assert_eq!(pool.longest_prefix(&(0..10).collect::<Vec<_>>()), None);
        assert!(pool.has_session("a"));
        assert!(!pool.has_session("b"));
    }

    #[test]
    fn eviction_takes_the_least_recently_used_and_spares_the_kept_session(
    ) -> Result<(), &'static str> {
        let mut pool = KvPool::default();
        pool.put(Some("old".into()), vec![1], cache(1), DraftState::default());
        pool.put(Some("mid".into()), vec![2], cache(1), DraftState::default());
        pool.put(Some("new".into()), vec![3], cache(1), DraftState::default());
        pool.touch(0); // "old" used last
        let e = pool.evict_one(None).ok_or("nothing evicted")?;
        assert_eq!(e.session.as_deref(), Some("mid"));
        let e = pool.evict_one(Some("new")).ok_or("nothing evicted")?;
        assert_eq!(e.session.as_deref(), Some("old"));
        assert!(pool.evict_one(Some("new")).is_none());
        assert_eq!(pool.len(), 1);
        Ok(())
    }

    #[test]
    fn anonymous_caches_of_one_prompt_are_kept_once() {
        let mut pool = KvPool::default();
        let long: Vec<u32> = (0..40).collect();
        pool.put(None, long[..30].to_vec(), cache(30), DraftState::default());
        // Longer: replaces the shorter. Shorter or equal: adds nothing.
        pool.put(None, long.clone(), cache(40), DraftState::default());
        pool.put(None, long[..20].to_vec(), cache(20), DraftState::default());
        pool.put(None, long.clone(), cache(40), DraftState::default());
        assert_eq!(pool.len(), 1);
        assert_eq!(pool.entry(0).tokens, long);
        // Another prompt, and a session with the same tokens, are kept beside it.
        pool.put(None, (100..140).collect(), cache(40), DraftState::default());
        pool.put(
            Some("s".into()),
            long[..30].to_vec(),
            cache(30),
            DraftState::default(),
        );
        assert_eq!(pool.len(), 3);
    }

    #[test]
    fn a_session_replaces_its_earlier_entry() -> Result<(), &'static str> {
        let mut pool = KvPool::default();
        pool.put(
            Some("s".into()),
            vec![1, 2],
            cache(2),
            DraftState::default(),
        );
        pool.put(
            Some("s".into()),
            vec![1, 2, 3],
            cache(3),
            DraftState::default(),
        );
        assert_eq!(pool.len(), 1);
        assert_eq!(
            pool.take_session("s").ok_or("no entry")?.tokens,
            vec![1, 2, 3]
        );
        assert!(pool.take_session("s").is_none());
        Ok(())
    }
}
