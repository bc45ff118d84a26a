//! The grammar compiler of one model: its token trie and llguidance's parser factory, built
//! once and shared by every constrained request, and the constraints compiled lately.

use super::custom_grammar::{embed, Spelling};
use super::guide::Guide;
use super::prose_guard::ProseGuard;
use super::spec::Constraint;
use super::token_env::TokenEnv;
use super::tool_call::{tool_call_grammar, TagStyle};
use super::tool_spec::{Layout, ToolSpec};
use crate::chat::tool_call::{CLOSE, OPEN};
use crate::chat::ToolChoice;
use crate::chat::ToolFormat;
use crate::error::{EngineError, Result};
use crate::text::tokenizer::Tokenizer;
use llguidance::toktrie::TokEnv;
use llguidance::{Matcher, ParserFactory};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Constraints kept compiled (an agent's tools come back every turn).
const COMPILED: usize = 32;

/// The grammar compiler of one model; turns [`Constraint`]s into [`Guide`]s.
pub struct Grammars {
    factory: ParserFactory,
    env: Arc<TokenEnv>,
    /// Compiled constraints at their start, keyed by the constraint's JSON, the most recently
    /// used last. A guide for one of them is a clone that shares its lexer with every other:
    /// the lexer's states, built lazily as masks need them (the first mask inside a bounded
    /// string or a tool's arguments costs milliseconds), are built once, not per request.
    compiled: Mutex<Vec<(String, Matcher)>>,
    /// Tool-call schemas checked, and how each compiles (once, not on every request that
    /// offers the tool).
    checked: Mutex<HashMap<String, Fit>>,
    /// Custom tools' Lark grammars checked, and whether each can be embedded in a call.
    embeddable: Mutex<HashMap<String, bool>>,
    /// How the model writes tool calls.
    tool_format: ToolFormat,
}

/// Checked tool-call schemas remembered before the set starts over.
const CHECKED: usize = 256;

/// How much of a tool's schema the call grammar holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// All of it.
    Whole,
    /// All but the keywords llguidance does not implement, which are ignored.
    Lenient,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Grammars({} tokens)", self.env.trie().vocab_size())
    }
}

impl Grammars {
    /// The compiler for `tokenizer`'s vocabulary; `eos` are the model's stop tokens.
    pub fn new(tokenizer: &Tokenizer, eos: &[u32]) -> Result<Self> {
        let env = Arc::new(TokenEnv::new(tokenizer, eos)?);
        let tok_env: TokEnv = env.clone();
        let mut factory = ParserFactory::new_simple(&tok_env)
            .map_err(|e| EngineError::invalid("tokenizer", format!("token trie: {e}")))?;
        // Grammar warnings come back as errors or are dropped, never printed by the library.
        factory.quiet();
        Ok(Self {
            factory,
            env,
            compiled: Mutex::new(Vec::new()),
            checked: Mutex::new(HashMap::new()),
            embeddable: Mutex::new(HashMap::new()),
            tool_format: ToolFormat::Json,
        })
    }

    /// Tool calls constrained in `format` (the model's, as its chat template writes them).
    pub fn with_tool_format(mut self, format: ToolFormat) -> Self {
        self.tool_format = format;
        self
    }

    /// The format tool calls are constrained in.
    pub fn tool_format(&self) -> ToolFormat {
        self.tool_format
    }

    /// The number of token ids the trie knows (logits beyond it are never allowed).
    pub fn vocab_size(&self) -> usize {
        self.env.trie().vocab_size()
    }

    /// The ids that end a constrained sequence (only where its grammar accepts).
    pub fn eos_tokens(&self) -> &[u32] {
        self.env.eos_tokens()
    }

    /// The raw bytes of token `id` (added tokens start with toktrie's marker byte 0xFF).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.env.trie().token(id)
    }

    /// How this vocabulary spells Qwen's `<tool_call>` tags: single tokens, or text.
    pub fn tag_style(&self) -> TagStyle {
        let trie = self.env.trie();
        let special = |tag: &str| trie.token_id_at_bytes(&[b"\xff", tag.as_bytes()].concat());
        if special(OPEN).is_some() && special(CLOSE).is_some() {
            TagStyle::SpecialTokens
        } else {
            TagStyle::Text
        }
    }

    /// The constraint that keeps an answer's tool calls valid: calls of the offered `tools`
    /// (OpenAI's format) as `choice` allows, each with arguments valid against its tool's
    /// schema; `None` where nothing needs constraining (`auto` with no tools). Where the
    /// grammar cannot hold a keyword of a schema (`propertyNames`, `if`/`then`, an unknown
    /// `format`, …) that part admits any value of its declared type (llguidance's lenient
    /// mode), logged once per schema; the finished call is then checked against the whole
    /// schema by whoever reads it. A schema that does not compile even so (a `$ref` to
    /// nothing) is refused: invalid `tools`, naming the tool and why. A custom tool's Lark
    /// grammar holds its input where it can be embedded in a call; one that cannot (a
    /// directive, an anchor, a syntax error) leaves the input free text, logged once.
    pub fn tool_calls(
        &self,
        tools: &[serde_json::Value],
        choice: &ToolChoice,
    ) -> Result<Option<Constraint>> {
        let mut specs = ToolSpec::from_openai(tools)?;
        for s in &mut specs {
            s.lenient = self.fit(s)? == Fit::Lenient;
            if s.grammar
                .as_deref()
                .is_some_and(|lark| !self.embeds(&s.name, lark))
            {
                s.grammar = None;
            }
        }
        tool_call_grammar(&specs, choice, self.tag_style(), self.tool_format)
    }

    /// How much of `spec`'s schema a call grammar can hold, compiled once per schema.
    fn fit(&self, spec: &ToolSpec) -> Result<Fit> {
        let schema = spec.call_schema(Layout::Dumps);
        let key = schema.to_string();
        if let Some(fit) = self.checked.lock().ok().and_then(|c| c.get(&key).copied()) {
            return Ok(fit);
        }
        let compiles = |spec: &ToolSpec| {
            self.factory
                .create_parser(Constraint::JsonSchema(spec.call_schema(Layout::Dumps)).grammar())
                .map(|_| ())
        };
        let fit = match compiles(spec) {
            Ok(()) => Fit::Whole,
            Err(strict) => {
                let lenient = ToolSpec {
                    lenient: true,
                    ..spec.clone()
                };
                compiles(&lenient).map_err(|e| {
                    EngineError::invalid(
                        "tools",
                        format!("tool `{}`: its parameters are not a schema constrained decoding can hold: {e}", spec.name),
                    )
                })?;
                tracing::warn!(
                    "tool `{}`: its schema is loosened for constrained decoding ({strict}): \
                     those parts take any value of their type, and each call is checked \
                     against the whole schema",
                    spec.name
                );
                Fit::Lenient
            }
        };
        if let Ok(mut checked) = self.checked.lock() {
            if checked.len() == CHECKED {
                checked.clear();
            }
            checked.insert(key, fit);
        }
        Ok(fit)
    }

    /// Whether tool `name`'s Lark grammar can hold its input inside a call, checked once per
    /// grammar.
    fn embeds(&self, name: &str, lark: &str) -> bool {
        let key = format!("{:?}\n{lark}", self.tool_format);
        if let Some(ok) = self
            .embeddable
            .lock()
            .ok()
            .and_then(|c| c.get(&key).copied())
        {
            return ok;
        }
        let (spelling, start) = match self.tool_format {
            ToolFormat::Json => (Spelling::Json, "start: \"\\\"\" g_start \"\\\"\"\n"),
            ToolFormat::Xml => (Spelling::Raw, "start: g_start\n"),
        };
        let checked = embed(lark, "g", spelling).and_then(|rules| {
            let grammar = Constraint::Lark(format!("{start}{rules}")).grammar();
            self.factory
                .create_parser(grammar)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        if let Err(why) = &checked {
            tracing::warn!(
                "tool `{name}`: its Lark grammar cannot hold its input ({why}); the input is \
                 free text"
            );
        }
        if let Ok(mut cache) = self.embeddable.lock() {
            if cache.len() == CHECKED {
                cache.clear();
            }
            cache.insert(key, checked.is_ok());
        }
        checked.is_ok()
    }

    /// A matcher for `constraint` at its start: a clone of the compiled one when it was
    /// compiled lately, else freshly compiled. A grammar llguidance cannot compile, or one that
    /// admits no text at all, is an error on `constraint` that says why.
    pub fn guide(&self, constraint: &Constraint) -> Result<Guide> {
        let key = serde_json::to_string(constraint)
            .map_err(|e| EngineError::invalid("constraint", e.to_string()))?;
        let cached = {
            let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
            compiled.iter().position(|(k, _)| *k == key).map(|i| {
                let entry = compiled.remove(i);
                let matcher = entry.1.clone();
                compiled.push(entry);
                matcher
            })
        };
        // A copy whose shared lexer broke (a panic inside the library poisons it for every
        // copy) is dropped with its constraint, which compiles afresh. Its start's mask is
        // cached, so the check costs microseconds.
        let cached = cached.and_then(|mut m| match m.compute_mask() {
            Ok(_) => Some(m),
            Err(_) => {
                let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
                compiled.retain(|(k, _)| *k != key);
                None
            }
        });
        let matcher = match cached {
            Some(m) => m,
            None => {
                let m = self.compile(constraint)?;
                let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
                if compiled.len() == COMPILED {
                    compiled.remove(0);
                }
                compiled.push((key, m.clone()));
                m
            }
        };
        let prose = matches!(constraint, Constraint::ToolCalls(_)).then(|| {
            let open = self
                .env
                .trie()
                .token_id_at_bytes(&[b"\xff".as_slice(), b"<tool_call>"].concat());
            ProseGuard::new(open, self.env.quoted())
        });
        Ok(Guide::new(matcher, self.env.clone(), prose))
    }

    fn compile(&self, constraint: &Constraint) -> Result<Matcher> {
        let invalid = |why: String| {
            EngineError::invalid("constraint", format!("{}: {why}", constraint.kind()))
        };
        let parser = self
            .factory
            .create_parser(constraint.grammar())
            .map_err(|e| invalid(e.to_string()))?;
        let mut matcher = Matcher::new(Ok(parser));
        let first = matcher.compute_mask().map_err(|e| invalid(e.to_string()))?;
        if first.is_zero() {
            return Err(invalid("it admits no text at all".into()));
        }
        Ok(matcher)
    }

    /// How many constraints are kept compiled now.
    pub fn compiled(&self) -> usize {
        self.compiled.lock().map_or(0, |c| c.len())
    }
}
