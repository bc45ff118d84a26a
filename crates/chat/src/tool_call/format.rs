//! How a model writes its tool calls, read off its chat template: Qwen2.5 and Qwen3 write
//! JSON in `<tool_call>` tags, Qwen3-Coder and Qwen3.5 write XML
//! (`<function=NAME><parameter=P>VALUE</parameter></function>`) in the same tags.

use serde::{Deserialize, Serialize};

/// How a model writes its tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolFormat {
    /// `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`.
    #[default]
    Json,
    /// `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>`.
    Xml,
}

impl ToolFormat {
    /// The format a chat template shows its calls in: XML where it writes `<function=`.
    pub fn of_template(source: &str) -> Self {
        if source.contains(super::xml::FUNCTION) {
            Self::Xml
        } else {
            Self::Json
        }
    }

    /// `json` or `xml`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Xml => "xml",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_says_the_format() {
        let qwen3 = "{{- \"<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call>\" }}";
        assert_eq!(ToolFormat::of_template(qwen3), ToolFormat::Json);
        let coder = "{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}";
        assert_eq!(ToolFormat::of_template(coder), ToolFormat::Xml);
    }
}
