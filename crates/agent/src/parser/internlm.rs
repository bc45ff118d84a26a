//! InternLM2's action protocol, as lagent's `PluginParser`, `InterpreterParser` and their
//! `MixedToolParser` read and write it: after its thought the model writes one action,
//! `<|action_start|><|plugin|>\n{"name": …, "parameters": {…}}<|action_end|>\n` to call a
//! tool or `<|action_start|><|interpreter|>\n` + Python code to run it. The tools are
//! described in system messages named `plugin` and `interpreter`, and results come back in
//! the `environment` role under the same names
//! ([`InternLmAggregator`](crate::aggregator::InternLmAggregator) writes that history).

use super::tagged::{json_action, shown_before};
use super::{OutputParser, ParsedOutput};
use hearth_chat::{ChatMessage, PyJson, ToolCall};
use serde_json::{json, Value};

/// Opens an action.
pub const ACTION_START: &str = "<|action_start|>";
/// Ends an action (a stop word: the model stops after writing it).
pub const ACTION_END: &str = "<|action_end|>";
/// The tool type of a call of a described tool.
pub const PLUGIN: &str = "plugin";
/// The tool type of code to run.
pub const INTERPRETER: &str = "interpreter";

/// lagent's meta instruction for InternLM2 with tools (`META_CN`): the model was tuned on it.
pub const META_CN: &str = "当开启工具以及代码时，根据需求选择合适的工具进行调用";

/// lagent's interpreter instruction (`INTERPRETER_CN`).
pub const INTERPRETER_CN: &str = "你现在已经能够在一个有状态的 Jupyter 笔记本环境中运行 Python 代码。当你向 python 发送含有 Python 代码的消息时，它将在该环境中执行。这个工具适用于多种场景，如数据分析或处理（包括数据操作、统计分析、图表绘制），复杂的计算问题（解决数学和物理难题），编程示例（理解编程概念或特性），文本处理和分析（比如文本解析和自然语言处理），机器学习和数据科学（用于展示模型训练和数据可视化），以及文件操作和数据导入（处理CSV、JSON等格式的文件）。";

/// lagent's plugin instruction (`PLUGIN_CN`); `{prompt}` becomes the tools as JSON.
pub const PLUGIN_CN: &str = "你可以使用如下工具：\n{prompt}\n如果你已经获得足够信息，请直接给出答案. 避免不必要的工具调用! 同时注意你可以使用的工具，不要随意捏造！";

fn marker(tool_type: &str) -> String {
    format!("<|{tool_type}|>")
}

/// An action as the model writes it: the thought, then the action between its markers.
pub fn write_action(thought: &str, tool_type: &str, action: &str) -> String {
    format!(
        "{thought}{ACTION_START}{}\n{action}{ACTION_END}\n",
        marker(tool_type)
    )
}

/// Reads and writes InternLM2's actions. [`Default`] takes both kinds, with lagent's
/// instructions; [`plugin`](Self::plugin) and [`interpreter`](Self::interpreter) one each.
#[derive(Debug, Clone)]
pub struct InternLmParser {
    /// The instruction before the tools' own (a system message with no name).
    pub meta: Option<String>,
    /// The plugin instruction; `{prompt}` is replaced by the offered tools as JSON. `None`:
    /// plugin calls are not read.
    pub plugin: Option<String>,
    /// The interpreter instruction. `None`: code actions are not read.
    pub interpreter: Option<String>,
    /// The tool that runs the interpreter's code (Hearth's `python`).
    pub interpreter_tool: String,
    /// Its argument that takes the code (`code`; lagent's `IPythonInterpreter` has `command`).
    pub code_parameter: String,
}

impl Default for InternLmParser {
    fn default() -> Self {
        Self {
            meta: Some(META_CN.into()),
            plugin: Some(PLUGIN_CN.into()),
            interpreter: Some(INTERPRETER_CN.into()),
            interpreter_tool: "python".into(),
            code_parameter: "code".into(),
        }
    }
}

impl InternLmParser {
    /// Plugin calls only (lagent's `PluginParser`).
    pub fn plugin() -> Self {
        Self {
            meta: None,
            interpreter: None,
            ..Self::default()
        }
    }

    /// Code actions only (lagent's `InterpreterParser`).
    pub fn interpreter() -> Self {
        Self {
            meta: None,
            plugin: None,
            ..Self::default()
        }
    }

    fn is_code(&self, call: &ToolCall) -> bool {
        self.interpreter.is_some() && call.function.name == self.interpreter_tool
    }

    /// The offered tools the plugin instruction lists: all but the interpreter's.
    fn plugins<'a>(&self, tools: &'a [Value]) -> Vec<&'a Value> {
        tools
            .iter()
            .map(|t| t.get("function").unwrap_or(t))
            .filter(|f| {
                self.interpreter.is_none()
                    || f["name"].as_str() != Some(self.interpreter_tool.as_str())
            })
            .collect()
    }

    fn read_plugin(&self, raw: &str) -> ParsedOutput {
        let opening = format!("{ACTION_START}{}", marker(PLUGIN));
        let Some((thought, rest)) = raw.split_once(&opening) else {
            return ParsedOutput::error(raw, format!("`<|plugin|>` without `{ACTION_START}`"));
        };
        let action = rest.split(ACTION_END).next().unwrap_or_default();
        match json_action(action) {
            Ok(call) => ParsedOutput::calls(raw, thought.to_string(), vec![call]),
            Err(e) => ParsedOutput::error(raw, format!("plugin: {e}")),
        }
    }

    fn read_code(&self, raw: &str) -> ParsedOutput {
        let opening = format!("{ACTION_START}{}", marker(INTERPRETER));
        let (thought, code) = match raw.split_once(&opening) {
            Some((t, c)) => (t.to_string(), c),
            // The marker without its opener: the thought ends where an opener was begun.
            None => {
                let (t, c) = raw.split_once(&marker(INTERPRETER)).unwrap_or((raw, ""));
                let t = t.rfind(ACTION_START).map_or(t, |i| &t[..i]);
                (t.trim().to_string(), c)
            }
        };
        let code = code.split(ACTION_END).next().unwrap_or_default().trim();
        let args = json!({ self.code_parameter.clone(): code });
        ParsedOutput::calls(
            raw,
            thought,
            vec![ToolCall::new(self.interpreter_tool.clone(), args)],
        )
    }
}

impl OutputParser for InternLmParser {
    fn parse(&self, raw: &str, _tools: &[String]) -> ParsedOutput {
        if self.plugin.is_some() && raw.contains(&marker(PLUGIN)) {
            return self.read_plugin(raw);
        }
        if self.interpreter.is_some() && raw.contains(&marker(INTERPRETER)) {
            return self.read_code(raw);
        }
        let mut out = ParsedOutput::text(raw);
        out.text = raw
            .split(ACTION_START)
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        out
    }

    fn format_instruction(&self, tools: &[Value]) -> Option<String> {
        let texts: Vec<String> = self
            .instruction_messages(tools)
            .iter()
            .map(|m| m.text().to_string())
            .collect();
        (!texts.is_empty()).then(|| texts.join("\n\n"))
    }

    fn instruction_messages(&self, tools: &[Value]) -> Vec<ChatMessage> {
        let named = |text: String, name: &str| {
            let mut m = ChatMessage::system(text);
            m.extra.insert("name".into(), name.into());
            m
        };
        let mut out = vec![];
        if let Some(meta) = self.meta.as_deref().filter(|m| !m.trim().is_empty()) {
            out.push(ChatMessage::system(meta));
        }
        let plugins = self.plugins(tools);
        if let (Some(template), false) = (&self.plugin, plugins.is_empty()) {
            let list = Value::Array(plugins.into_iter().cloned().collect());
            let prompt = PyJson::with_indent(Some(4)).dumps(&list);
            out.push(named(template.replace("{prompt}", &prompt), PLUGIN));
        }
        if let Some(text) = self.interpreter.as_deref().filter(|t| !t.trim().is_empty()) {
            out.push(named(text.to_string(), INTERPRETER));
        }
        out
    }

    fn tool_type(&self, call: &ToolCall) -> Option<String> {
        Some(
            if self.is_code(call) {
                INTERPRETER
            } else {
                PLUGIN
            }
            .to_string(),
        )
    }

    fn format_response(&self, parsed: &ParsedOutput) -> String {
        let Some(call) = parsed.tool_calls.first() else {
            return parsed.text.clone();
        };
        if self.is_code(call) {
            let code = match &call.function.arguments[&self.code_parameter] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            return write_action(&parsed.text, INTERPRETER, &code);
        }
        let action = json!({"name": call.function.name, "parameters": call.function.arguments});
        write_action(&parsed.text, PLUGIN, &PyJson::default().dumps(&action))
    }

    fn assistant_turn(&self, parsed: &ParsedOutput) -> ChatMessage {
        ChatMessage::assistant(self.format_response(parsed))
    }

    fn visible_prefix(&self, text: &str) -> usize {
        shown_before(text, ACTION_START)
    }

    fn stop_words(&self) -> Vec<String> {
        vec![ACTION_END.to_string()]
    }

    fn correction(&self, error: &str) -> String {
        format!(
            "Your action could not be read ({error}). Write it again as {ACTION_START}<|plugin|>\n{{\"name\": …, \"parameters\": {{…}}}}{ACTION_END}, or answer directly."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::ParseStatus;

    #[test]
    fn a_plugin_call_reads_and_writes_back_the_same() {
        let p = InternLmParser::default();
        let raw = "I will compute it.\n<|action_start|><|plugin|>\n{\"name\": \"calculator\", \"parameters\": {\"expression\": \"1+1\"}}<|action_end|>\n";
        let out = p.parse(raw, &[]);
        assert_eq!(out.status, ParseStatus::ValidTool);
        assert_eq!(out.text, "I will compute it.\n");
        assert_eq!(out.tool_calls[0].function.name, "calculator");
        assert_eq!(
            out.tool_calls[0].function.arguments,
            json!({"expression": "1+1"})
        );
        assert_eq!(p.format_response(&out), raw);
        assert_eq!(p.tool_type(&out.tool_calls[0]).as_deref(), Some(PLUGIN));
    }

    #[test]
    fn code_becomes_a_call_of_the_interpreter_tool() {
        let p = InternLmParser::default();
        let out = p.parse(
            "Let me run it.<|action_start|><|interpreter|>\nprint(2 ** 10)\n",
            &[],
        );
        assert_eq!(out.status, ParseStatus::ValidTool);
        assert_eq!(out.tool_calls[0].function.name, "python");
        assert_eq!(
            out.tool_calls[0].function.arguments,
            json!({"code": "print(2 ** 10)"})
        );
        assert_eq!(
            p.format_response(&out),
            "Let me run it.<|action_start|><|interpreter|>\nprint(2 ** 10)<|action_end|>\n"
        );
        // A plugin-only parser leaves code actions alone.
        let plain = InternLmParser::plugin().parse("x<|action_start|><|interpreter|>\n1", &[]);
        assert_eq!(plain.status, ParseStatus::NoTool);
        assert_eq!(plain.text, "x");
    }

    #[test]
    fn a_broken_action_is_a_parse_error_with_the_text_kept() {
        let p = InternLmParser::default();
        for raw in [
            "<|action_start|><|plugin|>\n{\"name\": \"calc\"",
            "<|action_start|><|plugin|>\nnot json<|action_end|>",
            "<|action_start|><|plugin|>\n{\"parameters\": {}}<|action_end|>",
            "<|plugin|>{\"name\": \"calc\"}",
        ] {
            let out = p.parse(raw, &[]);
            assert_eq!(out.status, ParseStatus::ParsingError, "{raw}");
            assert_eq!(out.raw, raw);
        }
    }

    #[test]
    fn instructions_name_plugin_and_interpreter_and_list_all_tools_but_the_interpreter() {
        let p = InternLmParser::default();
        let tools = vec![
            json!({"type": "function", "function": {"name": "calculator", "description": "Adds", "parameters": {"type": "object"}}}),
            json!({"type": "function", "function": {"name": "python", "description": "Runs", "parameters": {}}}),
        ];
        let msgs = p.instruction_messages(&tools);
        let names: Vec<Option<&str>> = msgs
            .iter()
            .map(|m| m.extra.get("name").and_then(Value::as_str))
            .collect();
        assert_eq!(names, [None, Some(PLUGIN), Some(INTERPRETER)]);
        assert!(msgs[1].text().contains("\"name\": \"calculator\""));
        assert!(!msgs[1].text().contains("\"python\""));
        assert!(msgs[1]
            .text()
            .starts_with("你可以使用如下工具：\n[\n    {\n"));
    }

    #[test]
    fn streaming_holds_back_an_action_and_a_partial_opener() {
        let p = InternLmParser::default();
        assert_eq!(p.visible_prefix("Thinking<|action_start|><|plu"), 8);
        assert_eq!(p.visible_prefix("Thinking<|act"), 8);
        assert_eq!(p.visible_prefix("Thinking<"), 8);
        assert_eq!(p.visible_prefix("Done."), 5);
        assert_eq!(p.visible_prefix("答え"), "答え".len());
    }
}
