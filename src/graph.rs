//! `hearth graph`: check, draw and compare contract files (TOML or YAML).

use anyhow::bail;
use hearth_graph::file::{diff, ContractFile};
use hearth_graph::Validator;
use std::path::PathBuf;

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
        file: PathBuf,
    },
    /// The graph as a Mermaid flowchart.
    Visualize { file: PathBuf },
    /// Nodes added, removed and changed from A to B.
    Diff { a: PathBuf, b: PathBuf },
}

pub fn run(cmd: GraphCommand) -> anyhow::Result<()> {
    match cmd {
        GraphCommand::Validate {
            strict,
            entry,
            file,
        } => {
            let f = ContractFile::load(&file)?;
            let registry = f.registry()?;
            let mut v = Validator::new(&registry);
            v.strict = strict;
            v.entry = entry;
            v.known_services = f.services.clone().map(|s| s.into_iter().collect());
            let result = v.validate();
            println!("{result}");
            if result.has_errors() {
                bail!("{}: the contracts have errors", file.display());
            }
        }
        GraphCommand::Visualize { file } => {
            print!("{}", ContractFile::load(&file)?.registry()?.mermaid())
        }
        GraphCommand::Diff { a, b } => {
            let changes = diff(&ContractFile::load(&a)?, &ContractFile::load(&b)?);
            if changes.is_empty() {
                println!("no changes");
            }
            for c in changes {
                println!("{c}");
            }
        }
    }
    Ok(())
}
