//! Knowledge from a folder of text files: the files are cut into passages (paragraphs, merged
//! up to a size) and ranked against a message with BM25, the ranking of classic search
//! engines — no model needed, and exact words (names, numbers, codes) count.

use crate::error::{AgentError, Result};
use crate::run::tool_agent::Knowledge;
use crate::tool_context::ToolContext;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// BM25's usual constants: term-frequency saturation and length normalisation.
const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Passages are paragraphs merged up to about this many bytes.
const PASSAGE_BYTES: usize = 600;
/// The folder whose subfolders are tenants' own: `tenants/<tenant>/…` is read by that tenant
/// only ([`FolderKnowledge::search_for`]).
const TENANTS: &str = "tenants";

/// Files larger than this are skipped (logs, dumps): they would drown the rest.
const MAX_FILE_BYTES: u64 = 2 << 20;

/// A passage of a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    /// The file, relative to the folder.
    pub file: PathBuf,
    /// The passage: paragraphs of the file.
    pub text: String,
}

/// A folder's text files as passages ranked with BM25: [`Knowledge`] for the tool loop.
pub struct FolderKnowledge {
    root: PathBuf,
    passages: Vec<Passage>,
    /// Per passage: term → count, and its length in terms.
    terms: Vec<(HashMap<String, u32>, usize)>,
    /// Term → number of passages holding it.
    document_frequency: HashMap<String, u32>,
    average_length: f64,
}

/// Words too common to say what a passage is about.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "how", "i", "in",
    "is", "it", "me", "my", "of", "on", "or", "that", "the", "this", "to", "was", "what", "when",
    "where", "which", "who", "why", "with", "you", "your",
];

/// A passage scoring under this share of the best one is noise, not knowledge.
const RELATIVE_FLOOR: f64 = 0.2;

/// Lower-case words of letters and digits, common ones left out.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
}

fn passages_of(text: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    let mut current = String::new();
    for para in text.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        if !current.is_empty() && current.len() + para.len() > PASSAGE_BYTES {
            out.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push_str("\n\n");
        }
        current.push_str(para);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

impl FolderKnowledge {
    /// Reads every UTF-8 text file under `root` (recursively; hidden entries skipped).
    pub fn open(root: &Path) -> Result<Self> {
        let err = |m: String| AgentError::invalid("knowledge", format!("{}: {m}", root.display()));
        if !root.is_dir() {
            return Err(err("not a directory".into()));
        }
        let mut files = vec![];
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            let entries = std::fs::read_dir(&dir)
                .map_err(|e| err(format!("cannot read {}: {e}", dir.display())))?;
            for entry in entries.flatten() {
                let path = entry.path();
                if entry.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                match entry.file_type() {
                    Ok(t) if t.is_dir() => dirs.push(path),
                    Ok(t) if t.is_file() => files.push(path),
                    _ => {}
                }
            }
        }
        files.sort();
        let mut passages = vec![];
        for path in files {
            if std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_FILE_BYTES) {
                tracing::warn!("knowledge: {} is over 2 MiB; skipped", path.display());
                continue;
            }
            // Binary files are not knowledge: whatever is not UTF-8 is left out.
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let file = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            for text in passages_of(&text) {
                passages.push(Passage {
                    file: file.clone(),
                    text,
                });
            }
        }
        if passages.is_empty() {
            return Err(err("holds no text files".into()));
        }
        Ok(Self::index(root, passages))
    }

    fn index(root: &Path, passages: Vec<Passage>) -> Self {
        let mut document_frequency: HashMap<String, u32> = HashMap::new();
        let terms: Vec<(HashMap<String, u32>, usize)> = passages
            .iter()
            .map(|p| {
                let mut counts: HashMap<String, u32> = HashMap::new();
                let mut len = 0;
                for w in words(&p.text) {
                    *counts.entry(w).or_default() += 1;
                    len += 1;
                }
                for w in counts.keys() {
                    *document_frequency.entry(w.clone()).or_default() += 1;
                }
                (counts, len)
            })
            .collect();
        let total: usize = terms.iter().map(|(_, l)| l).sum();
        let average_length = (total as f64 / terms.len().max(1) as f64).max(1.0);
        Self {
            root: root.to_path_buf(),
            passages,
            terms,
            document_frequency,
            average_length,
        }
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every passage, files in path order.
    pub fn passages(&self) -> &[Passage] {
        &self.passages
    }

    /// The best `k` passages for `query` with their scores, best first; passages sharing no
    /// word with the query are never returned.
    pub fn search(&self, query: &str, k: usize) -> Vec<(&Passage, f64)> {
        self.ranked(query, k, |_| true)
    }

    /// [`Self::search`] over what `tenant` may read: the files under `tenants/<tenant>/`
    /// and those outside `tenants/` (shared); no tenant reads only the shared ones.
    pub fn search_for(&self, query: &str, k: usize, tenant: Option<&str>) -> Vec<(&Passage, f64)> {
        let own = tenant.map(|t| Path::new(TENANTS).join(t));
        self.ranked(query, k, |p| {
            !p.file.starts_with(TENANTS) || own.as_ref().is_some_and(|o| p.file.starts_with(o))
        })
    }

    fn ranked(
        &self,
        query: &str,
        k: usize,
        readable: impl Fn(&Passage) -> bool,
    ) -> Vec<(&Passage, f64)> {
        let mut query_terms: Vec<String> = words(query).collect();
        query_terms.sort();
        query_terms.dedup();
        let n = self.passages.len() as f64;
        let mut scored: Vec<(usize, f64)> = self
            .terms
            .iter()
            .enumerate()
            .map(|(i, (counts, len))| {
                let score = query_terms
                    .iter()
                    .filter_map(|t| {
                        let tf = *counts.get(t)? as f64;
                        let df = *self.document_frequency.get(t)? as f64;
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        let norm = K1 * (1.0 - B + B * *len as f64 / self.average_length);
                        Some(idf * tf * (K1 + 1.0) / (tf + norm))
                    })
                    .sum::<f64>();
                (i, score)
            })
            .filter(|&(i, s)| s > 0.0 && readable(&self.passages[i]))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let best = scored.first().map_or(0.0, |(_, s)| *s);
        scored
            .into_iter()
            .filter(|(_, s)| *s >= best * RELATIVE_FLOOR)
            .take(k)
            .map(|(i, s)| (&self.passages[i], s))
            .collect()
    }
}

impl Knowledge for FolderKnowledge {
    fn retrieve(&self, query: &str, k: usize) -> Vec<String> {
        self.search(query, k)
            .into_iter()
            .map(|(p, _)| format!("({}) {}", p.file.display(), p.text))
            .collect()
    }

    fn retrieve_in(&self, query: &str, k: usize, context: &ToolContext) -> Vec<String> {
        self.search_for(query, k, context.tenant.as_deref())
            .into_iter()
            .map(|(p, _)| format!("({}) {}", p.file.display(), p.text))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;

    #[test]
    fn a_tenant_reads_its_own_passages_and_the_shared_ones() -> TestResult {
        let tmp = tempfile::tempdir()?;
        std::fs::create_dir_all(tmp.path().join("tenants/acme"))?;
        std::fs::create_dir_all(tmp.path().join("tenants/globex"))?;
        std::fs::write(tmp.path().join("policy.txt"), "Refunds take five days.")?;
        std::fs::write(
            tmp.path().join("tenants/acme/a.txt"),
            "Acme refunds go to Alice.",
        )?;
        std::fs::write(
            tmp.path().join("tenants/globex/g.txt"),
            "Globex refunds go to Gus.",
        )?;
        let k = FolderKnowledge::open(tmp.path())?;
        let files = |tenant: Option<&str>| -> Vec<String> {
            let mut f: Vec<String> = k
                .search_for("refunds", 5, tenant)
                .iter()
                .map(|(p, _)| p.file.display().to_string())
                .collect();
            f.sort();
            f
        };
        assert_eq!(files(Some("acme")), ["policy.txt", "tenants/acme/a.txt"]);
        assert_eq!(
            files(Some("globex")),
            ["policy.txt", "tenants/globex/g.txt"]
        );
        assert_eq!(files(None), ["policy.txt"]);
        let context = ToolContext {
            tenant: Some("acme".into()),
            ..Default::default()
        };
        let snippets = k.retrieve_in("refunds", 5, &context);
        assert!(snippets.iter().any(|s| s.contains("Alice")), "{snippets:?}");
        assert!(!snippets.iter().any(|s| s.contains("Gus")), "{snippets:?}");
        Ok(())
    }

    #[test]
    fn the_passage_with_the_rare_words_ranks_first() -> TestResult {
        let tmp = tempfile::tempdir()?;
        std::fs::write(
            tmp.path().join("wifi.txt"),
            "The office wifi password is lantern-42.\n\nAsk the front desk for a guest badge.",
        )?;
        std::fs::create_dir(tmp.path().join("more"))?;
        std::fs::write(
            tmp.path().join("more/lunch.md"),
            "Lunch is served at noon in the office kitchen.",
        )?;
        std::fs::write(tmp.path().join("blob.bin"), [0xff, 0xfe, 0x00, 0x80])?;
        std::fs::write(tmp.path().join(".hidden"), "wifi password is wrong-1")?;
        let k = FolderKnowledge::open(tmp.path())?;
        assert_eq!(k.passages().len(), 2, "{:?}", k.passages());
        let hits = k.retrieve("What is the wifi password?", 3);
        assert!(
            hits[0].contains("lantern-42") && hits[0].starts_with("(wifi.txt)"),
            "{hits:?}"
        );
        assert!(k.retrieve("When is lunch?", 1)[0].contains("noon"));
        assert!(
            k.retrieve("zebra", 3).is_empty(),
            "no shared word, no passage"
        );
        Ok(())
    }

    #[test]
    fn a_missing_or_empty_folder_is_an_error_naming_it() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let err = FolderKnowledge::open(&tmp.path().join("nope"))
            .err()
            .ok_or("opened")?
            .to_string();
        assert!(
            err.contains("nope") && err.contains("not a directory"),
            "{err}"
        );
        let err = FolderKnowledge::open(tmp.path())
            .err()
            .ok_or("opened")?
            .to_string();
        assert!(err.contains("no text files"), "{err}");
        Ok(())
    }
}
