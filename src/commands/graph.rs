//! `hearth graph`: check, draw, compare contract files (TOML, YAML or JSON) and show how a
//! supervisor routes a state.

use anyhow::{bail, Context};
use hearth_agent::{Llm, ScriptedLlm};
use hearth_graph::file::ContractFile;
use hearth_graph::{diff_contracts, State, Validator};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Subcommand, Debug)]
pub enum GraphCommand {
    /// ERROR / WARNING / INFO findings; exits non-zero on errors.
    Validate {
        /// Treat warnings as errors.
        #[arg(long)]
        strict: bool,
        /// The supervisor runs start at.
        #[arg(long, default_value = "main")]
        entry: String,
        /// A service that exists (repeatable; adds to the file's `services`).
        #[arg(long = "known-service")]
        known_services: Vec<String>,
        /// Only agent-contracts' checks, without Hearth's own.
        #[arg(long)]
        no_extra_checks: bool,
        /// Findings as JSON.
        #[arg(long)]
        json: bool,
        file: PathBuf,
    },
    /// The graph as a Mermaid flowchart.
    Visualize {
        /// A Markdown architecture document (slices, hierarchy, data flow, trigger
        /// priorities, node reference) instead.
        #[arg(long)]
        doc: bool,
        file: PathBuf,
    },
    /// Nodes added, removed and changed from A to B, as breaking, behavioral or nonbreaking;
    /// exits with 2 on a breaking change.
    Diff {
        /// The report as JSON.
        #[arg(long)]
        json: bool,
        a: PathBuf,
        b: PathBuf,
    },
    /// The decision a supervisor makes for a state, with its trace, as JSON.
    Decide {
        file: PathBuf,
        /// The state: a JSON object of slices (request, response, _internal, …).
        #[arg(long)]
        state: PathBuf,
        /// The supervisor that decides.
        #[arg(long, default_value = "main")]
        supervisor: String,
        /// An LLM router that answers this target (a node, `done`, `call_subgraph::<id>`).
        #[arg(long, conflicts_with = "llm_fails")]
        llm_answer: Option<String>,
        /// An LLM router that fails.
        #[arg(long)]
        llm_fails: bool,
    },
}

fn registry(f: &ContractFile, path: &Path) -> anyhow::Result<hearth_graph::Registry> {
    f.registry().with_context(|| path.display().to_string())
}

pub fn run(cmd: GraphCommand) -> anyhow::Result<()> {
    match cmd {
        GraphCommand::Validate {
            strict,
            entry,
            known_services,
            no_extra_checks,
            json,
            file,
        } => {
            let f = ContractFile::load(&file)?;
            let registry = registry(&f, &file)?;
            let mut v = Validator::new(&registry);
            v.strict = strict;
            v.entry = entry;
            v.extra_checks = !no_extra_checks;
            let mut known = f.services.clone();
            if !known_services.is_empty() {
                known.get_or_insert_with(Vec::new).extend(known_services);
            }
            v.known_services = known.map(|s| s.into_iter().collect());
            let result = v.validate();
            if json {
                println!("{}", serde_json::to_string_pretty(&result)?);
            } else {
                println!("{result}");
            }
            if result.has_errors() {
                bail!("{}: the contracts have errors", file.display());
            }
        }
        GraphCommand::Visualize { doc, file } => {
            let f = ContractFile::load(&file)?;
            let r = registry(&f, &file)?;
            print!(
                "{}",
                if doc {
                    r.architecture_doc()
                } else {
                    r.mermaid()
                }
            )
        }
        GraphCommand::Diff { json, a, b } => {
            let (fa, fb) = (ContractFile::load(&a)?, ContractFile::load(&b)?);
            let (ra, rb) = (registry(&fa, &a)?, registry(&fb, &b)?);
            let report = diff_contracts(ra.contracts(), rb.contracts())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{}", report.to_text());
            }
            if report.has_breaking() {
                std::process::exit(2);
            }
        }
        GraphCommand::Decide {
            file,
            state,
            supervisor,
            llm_answer,
            llm_fails,
        } => {
            let f = ContractFile::load(&file)?;
            let registry = registry(&f, &file)?;
            let text = std::fs::read_to_string(&state)
                .with_context(|| format!("{}: cannot read the state", state.display()))?;
            let slices: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{}: not JSON", state.display()))?;
            let Some(slices) = slices.as_object().cloned() else {
                bail!(
                    "{}: the state must be a JSON object of slices",
                    state.display()
                );
            };
            let mut sup = f.supervisor(&supervisor);
            let llm: Option<Arc<dyn Llm>> = match (llm_answer, llm_fails) {
                (Some(target), _) => Some(Arc::new(ScriptedLlm::new([serde_json::json!({
                    "next_node": target,
                    "reasoning": "--llm-answer",
                })
                .to_string()]))),
                (None, true) => Some(Arc::new(ScriptedLlm::new(Vec::<String>::new()))),
                (None, false) => None,
            };
            sup.llm = llm;
            let state = State { slices };
            let trace = tokio::runtime::Builder::new_current_thread()
                .build()?
                .block_on(sup.decide_with_trace(&state, &registry, None));
            println!("{}", serde_json::to_string_pretty(&trace)?);
        }
    }
    Ok(())
}
