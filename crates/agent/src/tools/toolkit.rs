//! A toolkit: one tool with several APIs (lagent's toolkits, whose methods are each a
//! `tool_api`), offered to the model as `<toolkit>.<api>` with lagent's description of a
//! subfunction.

use crate::tool::{Renamed, Tool, ToolRegistry};
use std::sync::Arc;

/// Several APIs under one tool's name.
#[derive(Clone)]
pub struct Toolkit {
    /// The toolkit's name, the first part of each API's.
    pub name: String,
    /// Its APIs, each a tool named by its own part.
    pub apis: Vec<Arc<dyn Tool>>,
}

impl Toolkit {
    /// A toolkit named `name` with `apis`.
    pub fn new(name: impl Into<String>, apis: Vec<Arc<dyn Tool>>) -> Self {
        Self {
            name: name.into(),
            apis,
        }
    }

    /// The APIs as tools named `<toolkit>.<api>`, described as lagent describes a
    /// subfunction.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.apis
            .iter()
            .map(|api| {
                Arc::new(Renamed {
                    name: format!("{}.{}", self.name, api.name()),
                    description: Some(format!(
                        "This is the subfunction for tool '{}', you can use this tool. The description of this function is: \n{}",
                        self.name,
                        api.description()
                    )),
                    inner: api.clone(),
                }) as Arc<dyn Tool>
            })
            .collect()
    }

    /// Adds every API to `registry`.
    pub fn register(&self, registry: &mut ToolRegistry) {
        for t in self.tools() {
            registry.add(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Calculator, CurrentTime};
    use hearth_chat::ToolCall;
    use serde_json::json;

    #[tokio::test]
    async fn each_api_is_offered_and_called_under_the_toolkit_name() {
        let kit = Toolkit::new("Math", vec![Arc::new(Calculator), Arc::new(CurrentTime)]);
        let mut reg = ToolRegistry::new();
        kit.register(&mut reg);
        assert_eq!(reg.names(), ["Math.calculator", "Math.current_time"]);
        let spec = &reg.specs()[0]["function"];
        assert!(spec["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("This is the subfunction for tool 'Math'")));
        assert_eq!(spec["parameters"], Calculator.parameters());
        let r = reg
            .execute(&ToolCall::new(
                "Math.calculator",
                json!({"expression": "2*21"}),
            ))
            .await;
        assert_eq!(r.content, "42");
    }
}
