//! agent-contracts' `build_graph_from_registry`: a runtime over a registry with the LLM its
//! supervisors and nodes use (one for all, or a provider asked once for each), supervisors
//! made by a factory, and the services its nodes declare.

use crate::error::Result;
use crate::runtime::registry::Registry;
use crate::runtime::store::StateStore;
use crate::runtime::supervisor::Supervisor;
use crate::runtime::Runtime;
use hearth_agent::Llm;
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

/// Gives an LLM each time it is asked (agent-contracts' `llm_provider`).
pub type LlmProvider = Arc<dyn Fn() -> Arc<dyn Llm> + Send + Sync>;

/// Makes the supervisor of a name with the LLM it should use (agent-contracts'
/// `supervisor_factory(name, llm)`).
pub type SupervisorFactory = Arc<dyn Fn(&str, Option<Arc<dyn Llm>>) -> Supervisor + Send + Sync>;

/// What [`build_graph_from_registry`] wires in.
#[derive(Clone, Default)]
pub struct GraphOptions {
    /// The LLM for supervisors and nodes, where no provider is given.
    pub llm: Option<Arc<dyn Llm>>,
    /// Asked for an LLM once per supervisor and once for the nodes; before `llm`.
    pub llm_provider: Option<LlmProvider>,
    /// Makes each supervisor; without one, Hearth's (rules, then the LLM).
    pub supervisor_factory: Option<SupervisorFactory>,
    /// Services by the names contracts give in `services`.
    pub services: HashMap<String, Arc<dyn Any + Send + Sync>>,
}

impl GraphOptions {
    fn llm(&self) -> Option<Arc<dyn Llm>> {
        match &self.llm_provider {
            Some(provide) => Some(provide()),
            None => self.llm.clone(),
        }
    }
}

/// A runtime over `registry` (sessions in `store`) with `options` wired in: every supervisor
/// its contracts and subgraphs name, from the factory or Hearth's own, each with its LLM.
pub fn build_graph_from_registry(
    registry: Registry,
    store: Arc<dyn StateStore>,
    options: GraphOptions,
) -> Result<Runtime> {
    let mut runtime = Runtime::new(registry, store)?;
    let mut names: Vec<String> = runtime.supervisors.keys().cloned().collect();
    names.sort();
    for name in names {
        let llm = options.llm();
        let sup = match &options.supervisor_factory {
            Some(make) => make(&name, llm),
            None => Supervisor {
                llm,
                ..Supervisor::hearth(&name)
            },
        };
        runtime.supervisors.insert(name, sup);
    }
    runtime.config.llm = options.llm();
    runtime.config.services.extend(options.services);
    Ok(runtime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{NodeContract, TriggerCondition};
    use crate::runtime::node::{Node, NodeConfig, NodeInputs, NodeOutputs};
    use crate::runtime::store::MemoryStore;
    use hearth_agent::ScriptedLlm;
    use std::sync::atomic::{AtomicUsize, Ordering};

    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    /// A node that writes nothing.
    struct Idle(NodeContract);

    #[async_trait::async_trait]
    impl Node for Idle {
        fn contract(&self) -> &NodeContract {
            &self.0
        }
        async fn execute(
            &self,
            _inputs: &NodeInputs,
            _config: &NodeConfig,
        ) -> std::result::Result<NodeOutputs, String> {
            Ok(NodeOutputs::new())
        }
    }

    fn registry() -> std::result::Result<Registry, Box<dyn std::error::Error + Send + Sync>> {
        let mut r = Registry::new();
        for (name, sup) in [("a", "main"), ("b", "side")] {
            let mut c = NodeContract::new(name, sup);
            c.requires_llm = name == "a";
            c.services = vec!["db".into()];
            c.trigger_conditions = vec![TriggerCondition::default()];
            r.add_node(Arc::new(Idle(c)))?;
        }
        Ok(r)
    }

    #[test]
    fn the_factory_makes_every_supervisor_and_the_provider_gives_each_an_llm() -> TestResult {
        let asked = Arc::new(AtomicUsize::new(0));
        let count = asked.clone();
        let made = Arc::new(std::sync::Mutex::new(vec![]));
        let seen = made.clone();
        let options = GraphOptions {
            llm_provider: Some(Arc::new(move || {
                count.fetch_add(1, Ordering::SeqCst);
                Arc::new(ScriptedLlm::new(Vec::<String>::new())) as Arc<dyn Llm>
            })),
            supervisor_factory: Some(Arc::new(move |name: &str, llm: Option<Arc<dyn Llm>>| {
                if let Ok(mut m) = seen.lock() {
                    m.push((name.to_string(), llm.is_some()));
                }
                Supervisor {
                    max_iterations: 3,
                    llm,
                    ..Supervisor::new(name)
                }
            })),
            services: [(
                "db".to_string(),
                Arc::new(42u32) as Arc<dyn Any + Send + Sync>,
            )]
            .into(),
            ..GraphOptions::default()
        };
        let rt = build_graph_from_registry(registry()?, Arc::new(MemoryStore::default()), options)?;
        assert_eq!(
            *made.lock().map_err(|_| "poisoned")?,
            [("main".to_string(), true), ("side".to_string(), true)]
        );
        assert_eq!(
            asked.load(Ordering::SeqCst),
            3,
            "two supervisors and the nodes"
        );
        assert!(rt
            .supervisors
            .values()
            .all(|s| s.max_iterations == 3 && s.llm.is_some()));
        assert!(
            rt.missing_dependencies().is_empty(),
            "{:?}",
            rt.missing_dependencies()
        );
        Ok(())
    }

    #[test]
    fn without_options_the_runtime_reports_what_is_missing() -> TestResult {
        let rt = build_graph_from_registry(
            registry()?,
            Arc::new(MemoryStore::default()),
            GraphOptions::default(),
        )?;
        let missing = rt.missing_dependencies();
        assert!(
            missing.iter().any(|m| m.contains("`a` requires an LLM")),
            "{missing:?}"
        );
        assert_eq!(
            missing
                .iter()
                .filter(|m| m.contains("service `db`"))
                .count(),
            2
        );
        assert!(rt.supervisors.values().all(|s| s.llm.is_none()));
        Ok(())
    }
}
