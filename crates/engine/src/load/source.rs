//! Where a model's files come from: a local directory, or a Hugging Face hub repository
//! fetched into the standard cache (and read from it alone when offline).

use crate::error::{EngineError, Result};
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The files of one dense checkpoint, resolved to local paths.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// What the user asked for (a directory or a repo id), for messages.
    pub origin: String,
    /// `config.json`.
    pub config: PathBuf,
    /// `generation_config.json`, if present.
    pub generation_config: Option<PathBuf>,
    /// `tokenizer.json`.
    pub tokenizer: PathBuf,
    /// `tokenizer_config.json`, if present.
    pub tokenizer_config: Option<PathBuf>,
    /// `chat_template.jinja`, where transformers ≥ 4.43 saves the template (it wins over
    /// `tokenizer_config.json`'s, as in transformers).
    pub chat_template: Option<PathBuf>,
    /// One file, or the shards listed by `model.safetensors.index.json`.
    pub weights: Vec<PathBuf>,
}

/// How to reach the hub.
#[derive(Debug, Clone, Default)]
pub struct HubOptions {
    /// Revision (branch, tag or commit) to fetch; default `main`.
    pub revision: Option<String>,
    /// Use only the cache (also set by `HF_HUB_OFFLINE=1`).
    pub offline: bool,
    /// Overrides the cache directory (else `HF_HUB_CACHE`, `HF_HOME/hub`, `~/.cache/huggingface/hub`).
    pub cache_dir: Option<PathBuf>,
    /// Show download progress bars.
    pub progress: bool,
}

impl HubOptions {
    /// Whether `HF_HUB_OFFLINE` asks for offline mode.
    pub fn offline_from_env() -> bool {
        std::env::var("HF_HUB_OFFLINE")
            .map(|v| matches!(v.trim(), "1" | "true" | "TRUE" | "yes" | "ON" | "on"))
            .unwrap_or(false)
    }

    /// The hub cache directory in use.
    pub fn cache_dir(&self) -> PathBuf {
        if let Some(dir) = &self.cache_dir {
            return dir.clone();
        }
        if let Ok(dir) = std::env::var("HF_HUB_CACHE") {
            return dir.into();
        }
        hf_hub::Cache::from_env().path().clone()
    }
}

/// Resolves `spec` — a directory or a hub repo id like `Qwen/Qwen2.5-0.5B-Instruct` — to files.
pub fn resolve(spec: &str, hub: &HubOptions) -> Result<ModelFiles> {
    let path = Path::new(spec);
    if path.is_dir() {
        return local_dir(path);
    }
    if path.exists() {
        return Err(EngineError::invalid(
            "model",
            format!("{spec} is a file; give the checkpoint's directory"),
        ));
    }
    if is_repo_id(spec) {
        return hub_repo(spec, hub);
    }
    Err(EngineError::invalid(
        "model",
        format!("`{spec}` is neither a directory nor a hub repo id (owner/name)"),
    ))
}

fn is_repo_id(spec: &str) -> bool {
    let mut parts = spec.split('/');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty()
                && p != ".."
                && p != "."
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
    };
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

/// A checkpoint directory as `save_pretrained` writes it.
pub fn local_dir(dir: &Path) -> Result<ModelFiles> {
    let required = |name: &'static str| {
        let p = dir.join(name);
        if p.is_file() {
            Ok(p)
        } else {
            Err(EngineError::MissingFile {
                what: name,
                path: p,
            })
        }
    };
    let optional = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
    let config = required("config.json")?;
    let tokenizer = required("tokenizer.json")?;
    let weights = match optional("model.safetensors.index.json") {
        Some(index) => shard_names(&index)?
            .into_iter()
            .map(|name| {
                let p = dir.join(&name);
                if p.is_file() {
                    Ok(p)
                } else {
                    Err(EngineError::MissingFile {
                        what: "safetensors shard (listed in model.safetensors.index.json)",
                        path: p,
                    })
                }
            })
            .collect::<Result<Vec<_>>>()?,
        None => {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|e| EngineError::io(dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(EngineError::MissingFile {
                    what: "*.safetensors weights",
                    path: dir.join("model.safetensors"),
                });
            }
            files
        }
    };
    Ok(ModelFiles {
        origin: dir.display().to_string(),
        config,
        generation_config: optional("generation_config.json"),
        tokenizer,
        tokenizer_config: optional("tokenizer_config.json"),
        chat_template: optional("chat_template.jinja"),
        weights,
    })
}

/// The shard file names in `model.safetensors.index.json`, each once, in order.
fn shard_names(index: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(index).map_err(|e| EngineError::io(index, e))?;
    let bad = |message: String| EngineError::Config {
        path: index.to_path_buf(),
        field: "weight_map".into(),
        message,
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("missing or not an object".into()))?;
    let mut names = BTreeSet::new();
    for (tensor, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| bad(format!("entry for `{tensor}` is not a file name")))?;
        if file.contains('/') || file.contains("..") {
            return Err(bad(format!(
                "shard name `{file}` leaves the model directory"
            )));
        }
        names.insert(file.to_owned());
    }
    if names.is_empty() {
        return Err(bad("lists no shards".into()));
    }
    Ok(names.into_iter().collect())
}

/// Where a repo file is: from the cache only (offline), else fetched.
type Fetch = Box<dyn Fn(&str) -> Result<Option<PathBuf>>>;

/// One repository in the hub or (offline) only in the local cache.
struct HubRepo {
    repo_id: String,
    revision: String,
    cache_dir: PathBuf,
    offline: bool,
    fetch: Fetch,
}

impl HubRepo {
    fn new(repo_id: &str, hub: &HubOptions) -> Result<Self> {
        let revision = hub.revision.clone().unwrap_or_else(|| "main".into());
        let cache_dir = hub.cache_dir();
        let repo =
            hf_hub::Repo::with_revision(repo_id.into(), hf_hub::RepoType::Model, revision.clone());
        let offline = hub.offline || HubOptions::offline_from_env();
        let fetch: Fetch = if offline {
            let cached = hf_hub::Cache::new(cache_dir.clone()).repo(repo);
            Box::new(move |file| Ok(cached.get(file)))
        } else {
            let api =
                hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(cache_dir.clone()))
                    .with_progress(hub.progress)
                    .build()
                    .map_err(|e| EngineError::Hub {
                        repo: repo_id.into(),
                        file: "-".into(),
                        message: e.to_string(),
                    })?
                    .repo(repo);
            let repo_id = repo_id.to_owned();
            Box::new(move |file| match api.get(file) {
                Ok(p) => Ok(Some(p)),
                // A file the repo does not have (optional ones are expected to be missing).
                Err(e) if e.to_string().contains("status code 404") => Ok(None),
                Err(e) => Err(EngineError::Hub {
                    repo: repo_id.clone(),
                    file: file.into(),
                    message: e.to_string(),
                }),
            })
        };
        Ok(Self {
            repo_id: repo_id.into(),
            revision,
            cache_dir,
            offline,
            fetch,
        })
    }

    fn optional(&self, file: &str) -> Result<Option<PathBuf>> {
        (self.fetch)(file)
    }

    fn required(&self, file: &str) -> Result<PathBuf> {
        self.optional(file)?.ok_or_else(|| {
            if self.offline {
                EngineError::NotCached {
                    repo: self.repo_id.clone(),
                    revision: self.revision.clone(),
                    file: file.into(),
                    cache: self.cache_dir.clone(),
                }
            } else {
                EngineError::Hub {
                    repo: self.repo_id.clone(),
                    file: file.into(),
                    message: "not found in the repository".into(),
                }
            }
        })
    }
}

/// One file of a hub repository (a GGUF, say), fetched into or found in the cache.
pub fn hub_file(repo_id: &str, file: &str, hub: &HubOptions) -> Result<PathBuf> {
    HubRepo::new(repo_id, hub)?.required(file)
}

/// A model file that `scripts/fetch-test-models.sh` already fetched: it lies in
/// `HEARTH_MODELS`, else `$HEARTH_CACHE/models`, else `~/.cache/hearth/models`. Lets a model
/// card load offline without the hub.
pub fn fetched_model(file: &str) -> Option<PathBuf> {
    fetched_in(&fetched_models_dir(|k| std::env::var_os(k))?, file)
}

/// The script's directory; an empty variable counts as unset, as in the script's `${VAR:-…}`.
fn fetched_models_dir(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("HEARTH_MODELS")
        .or_else(|| set("HEARTH_CACHE").map(|d| d.join("models")))
        .or_else(|| set("HOME").map(|h| h.join(".cache/hearth/models")))
}

fn fetched_in(dir: &Path, file: &str) -> Option<PathBuf> {
    // A card names a bare file; anything with a directory part is not the script's.
    if Path::new(file).file_name() != Some(OsStr::new(file)) {
        return None;
    }
    Some(dir.join(file)).filter(|p| p.is_file())
}

/// Fetches (or, offline, looks up) a repo's files in the Hugging Face cache.
fn hub_repo(repo_id: &str, hub: &HubOptions) -> Result<ModelFiles> {
    let repo = HubRepo::new(repo_id, hub)?;
    let required = |file: &str| repo.required(file);
    let fetcher = |file: &str| repo.optional(file);
    let revision = repo.revision.clone();
    let config = required("config.json")?;
    let tokenizer = required("tokenizer.json")?;
    let weights = match fetcher("model.safetensors.index.json")? {
        Some(index) => shard_names(&index)?
            .iter()
            .map(|f| required(f))
            .collect::<Result<Vec<_>>>()?,
        None => vec![required("model.safetensors")?],
    };
    Ok(ModelFiles {
        origin: format!("{repo_id}@{revision}"),
        config,
        generation_config: fetcher("generation_config.json")?,
        tokenizer,
        tokenizer_config: fetcher("tokenizer_config.json")?,
        chat_template: fetcher("chat_template.jinja")?,
        weights,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetched_models_follow_the_fetch_script(
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        fn vars<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
            move |k| {
                pairs
                    .iter()
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| OsString::from(v))
            }
        }
        let all = [
            ("HEARTH_MODELS", "/m"),
            ("HEARTH_CACHE", "/c"),
            ("HOME", "/h"),
        ];
        assert_eq!(fetched_models_dir(vars(&all)), Some("/m".into()));
        let cache = [
            ("HEARTH_MODELS", ""),
            ("HEARTH_CACHE", "/c"),
            ("HOME", "/h"),
        ];
        assert_eq!(fetched_models_dir(vars(&cache)), Some("/c/models".into()));
        assert_eq!(
            fetched_models_dir(vars(&[("HOME", "/h")])),
            Some("/h/.cache/hearth/models".into())
        );
        assert_eq!(fetched_models_dir(vars(&[])), None);

        let dir = tempfile::tempdir()?;
        let name = "tiny-q4_k_m.gguf";
        assert_eq!(fetched_in(dir.path(), name), None);
        std::fs::write(dir.path().join(name), b"GGUF")?;
        assert_eq!(fetched_in(dir.path(), name), Some(dir.path().join(name)));
        std::fs::create_dir(dir.path().join("sub"))?;
        std::fs::write(dir.path().join("sub").join(name), b"GGUF")?;
        assert_eq!(fetched_in(dir.path(), &format!("sub/{name}")), None);
        assert_eq!(fetched_in(dir.path(), "sub"), None);
        Ok(())
    }

    /// Lays out `models--{owner}--{name}` the way hf-hub writes its cache.
    fn fake_cache(root: &Path, repo: &str, files: &[(&str, &str)]) {
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let dir = root.join(format!("models--{}", repo.replace('/', "--")));
        std::fs::create_dir_all(dir.join("refs")).unwrap();
        std::fs::write(dir.join("refs/main"), commit).unwrap();
        let snap = dir.join("snapshots").join(commit);
        std::fs::create_dir_all(&snap).unwrap();
        for (name, body) in files {
            std::fs::write(snap.join(name), body).unwrap();
        }
    }

    fn offline(cache: &Path) -> HubOptions {
        HubOptions {
            offline: true,
            cache_dir: Some(cache.into()),
            ..Default::default()
        }
    }

    #[test]
    fn resolves_a_sharded_repo_from_the_cache_offline() {
        let tmp = tempfile::tempdir().unwrap();
        let index = r#"{"weight_map": {"a": "model-00001-of-00002.safetensors",
                        "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}"#;
        fake_cache(
            tmp.path(),
            "Qwen/Qwen2.5-7B-Instruct",
            &[
                ("config.json", "{}"),
                ("tokenizer.json", "{}"),
                ("generation_config.json", "{}"),
                ("model.safetensors.index.json", index),
                ("model-00001-of-00002.safetensors", ""),
                ("model-00002-of-00002.safetensors", ""),
            ],
        );
        let files = resolve("Qwen/Qwen2.5-7B-Instruct", &offline(tmp.path())).unwrap();
        assert_eq!(files.weights.len(), 2);
        assert!(files.weights[1].ends_with("model-00002-of-00002.safetensors"));
        assert!(files.generation_config.is_some());
        assert!(files.tokenizer_config.is_none());
        assert_eq!(files.origin, "Qwen/Qwen2.5-7B-Instruct@main");
    }

    #[test]
    fn offline_names_the_missing_file() {
        let tmp = tempfile::tempdir().unwrap();
        fake_cache(
            tmp.path(),
            "Qwen/Qwen3-0.6B",
            &[("config.json", "{}"), ("tokenizer.json", "{}")],
        );
        let err = resolve("Qwen/Qwen3-0.6B", &offline(tmp.path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`model.safetensors`") && err.contains("Qwen/Qwen3-0.6B"),
            "{err}"
        );

        let err = resolve("Qwen/NotThere", &offline(tmp.path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`config.json`") && err.contains("not in the Hugging Face cache"),
            "{err}"
        );
    }

    #[test]
    fn local_dir_requires_config_and_tokenizer() {
        let tmp = tempfile::tempdir().unwrap();
        let err = local_dir(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
        std::fs::write(tmp.path().join("config.json"), "{}").unwrap();
        let err = local_dir(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("tokenizer.json"), "{err}");
        std::fs::write(tmp.path().join("tokenizer.json"), "{}").unwrap();
        let err = local_dir(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("safetensors"), "{err}");
    }

    #[test]
    fn rejects_specs_that_are_neither() {
        let err = resolve("no such thing", &HubOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("model"), "{err}");
        assert!(!is_repo_id("../etc"));
        assert!(is_repo_id("Qwen/Qwen2.5-0.5B-Instruct"));
    }
}
