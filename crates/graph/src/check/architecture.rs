//! An architecture document of a registry in Markdown, with the sections agent-contracts'
//! visualiser writes: state slices, the supervisor hierarchy, data flow, trigger priorities
//! and a node reference. Diagrams are Mermaid with escaped ids.

use crate::contract::matching::condition_text;
use crate::runtime::registry::{mermaid_id, mermaid_label, Registry};
use std::collections::BTreeSet;

/// `|` would end a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items
            .iter()
            .map(|s| format!("`{}`", cell(s)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn slices_section(r: &Registry) -> String {
    let mut out = String::from(
        "## 📦 State Slices\n\n| Slice | Readers | Writers |\n|-------|---------|---------|\n",
    );
    let mut names: BTreeSet<&str> = r.valid_slices().iter().map(String::as_str).collect();
    for c in r.contracts() {
        names.extend(c.reads.iter().chain(&c.writes).map(String::as_str));
    }
    for s in names {
        let who = |f: &dyn Fn(&crate::NodeContract) -> bool| {
            let n: Vec<String> = r
                .contracts()
                .iter()
                .filter(|c| f(c))
                .map(|c| c.name.clone())
                .collect();
            list(&n)
        };
        let readers = who(&|c| c.reads.iter().any(|x| x == s));
        let writers = who(&|c| c.writes.iter().any(|x| x == s));
        out.push_str(&format!("| `{}` | {readers} | {writers} |\n", cell(s)));
    }
    out
}

fn dataflow_section(r: &Registry) -> String {
    let mut out = String::from("## 🔀 Data Flow\n\n```mermaid\nflowchart LR\n");
    let mut slices: BTreeSet<&str> = BTreeSet::new();
    for c in r.contracts() {
        slices.extend(c.reads.iter().chain(&c.writes).map(String::as_str));
    }
    for s in &slices {
        out.push_str(&format!(
            "    {}[(\"{}\")]\n",
            mermaid_id("slice", s),
            mermaid_label(s)
        ));
    }
    for c in r.contracts() {
        let node = mermaid_id("node", &c.name);
        out.push_str(&format!("    {node}[\"{}\"]\n", mermaid_label(&c.name)));
        for s in c.reads.iter().collect::<BTreeSet<_>>() {
            out.push_str(&format!("    {} --> {node}\n", mermaid_id("slice", s)));
        }
        for s in c.writes.iter().collect::<BTreeSet<_>>() {
            out.push_str(&format!("    {node} --> {}\n", mermaid_id("slice", s)));
        }
    }
    out.push_str("```\n");
    out
}

fn triggers_section(r: &Registry) -> String {
    let mut out = String::from("## 🎯 Trigger Priorities\n");
    for sup in r.supervisors() {
        out.push_str(&format!(
            "\n### {}\n\n| Priority | Node | Condition | Hint |\n|----------|------|-----------|------|\n",
            cell(&sup)
        ));
        let mut rows: Vec<(i64, String, String, String)> = r
            .nodes_of(&sup)
            .flat_map(|c| {
                c.trigger_conditions.iter().map(|t| {
                    (
                        t.priority,
                        c.name.clone(),
                        condition_text(t),
                        t.llm_hint.clone().unwrap_or_default(),
                    )
                })
            })
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.0));
        for (p, node, cond, hint) in rows {
            out.push_str(&format!(
                "| {p} | `{}` | {} | {} |\n",
                cell(&node),
                cell(&cond),
                cell(&hint)
            ));
        }
    }
    out
}

fn nodes_section(r: &Registry) -> String {
    let mut out = String::from(
        "## 📋 Nodes Reference\n\n| Node | Supervisor | Reads | Writes | LLM | Terminal |\n|------|------------|-------|--------|-----|----------|\n",
    );
    for c in r.contracts() {
        let yes = |b: bool| if b { "✅" } else { "-" };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            cell(&c.name),
            cell(&c.supervisor),
            list(&c.reads),
            list(&c.writes),
            yes(c.requires_llm),
            yes(c.is_terminal)
        ));
    }
    out
}

impl Registry {
    /// The whole document, sections separated by rules.
    pub fn architecture_doc(&self) -> String {
        let hierarchy = format!(
            "## 🏛️ Supervisor Hierarchy\n\n```mermaid\n{}```\n",
            self.mermaid()
        );
        [
            "# 🏗️ Agent Architecture\n\n> Generated from the node contracts\n".to_string(),
            slices_section(self),
            hierarchy,
            dataflow_section(self),
            triggers_section(self),
            nodes_section(self),
        ]
        .join("\n---\n\n")
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::contract::{NodeContract, TriggerCondition};

    #[test]
    fn every_section_names_the_nodes() -> TestResult {
        let mut r = Registry::new();
        let mut c = NodeContract::new("bad-name", "main");
        c.reads = vec!["request".into()];
        c.writes = vec!["response".into()];
        c.trigger_conditions = vec![TriggerCondition {
            priority: 60,
            llm_hint: Some("a|b".into()),
            ..Default::default()
        }];
        r.add_contract(c)?;
        let doc = r.architecture_doc();
        for section in [
            "## 📦 State Slices",
            "## 🏛️ Supervisor Hierarchy",
            "## 🔀 Data Flow",
            "## 🎯 Trigger Priorities",
            "## 📋 Nodes Reference",
        ] {
            assert!(doc.contains(section), "{section}\n{doc}");
        }
        assert!(
            doc.contains("| 60 | `bad-name` | (always) | a\\|b |"),
            "{doc}"
        );
        assert!(doc.contains("slice_request --> node_bad_2d_name"), "{doc}");
        assert!(doc.contains("| `response` | - | `bad-name` |"), "{doc}");
        Ok(())
    }
}
