//! State: named slices of JSON (`request`, `response`, `_internal`, and custom ones), typed
//! accessors for the built-in fields, and the rules for undeclared reads and writes.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The request slice: session id, action, params, message, image.
pub const REQUEST: &str = "request";
/// The response slice: response type, message and data.
pub const RESPONSE: &str = "response";
/// The runtime's own slice: turn count, next node, errors.
pub const INTERNAL: &str = "_internal";
/// Slices every registry has.
pub const BUILT_IN_SLICES: &[&str] = &[REQUEST, RESPONSE, INTERNAL];

/// What happens on reads and writes a contract did not declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IoPolicy {
    /// Fail with a contract violation.
    pub strict: bool,
    /// Log a warning.
    pub warn: bool,
    /// Drop undeclared writes (when not strict).
    pub drop_undeclared_writes: bool,
}

impl Default for IoPolicy {
    fn default() -> Self {
        Self {
            strict: false,
            warn: true,
            drop_undeclared_writes: true,
        }
    }
}

/// The graph's state: named slices, each a JSON object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Slice name → its object.
    pub slices: Map<String, Value>,
}

impl State {
    /// The built-in slices, empty.
    pub fn new() -> Self {
        let mut s = Self::default();
        for name in BUILT_IN_SLICES {
            s.slices.insert((*name).into(), json!({}));
        }
        s
    }

    /// The slice `name`, or null if absent.
    pub fn slice(&self, name: &str) -> &Value {
        static EMPTY: Value = Value::Null;
        self.slices.get(name).unwrap_or(&EMPTY)
    }

    /// The slice `name` to modify, created (or replaced by `{}` if not an object) first.
    pub fn slice_mut(&mut self, name: &str) -> &mut Map<String, Value> {
        let v = self
            .slices
            .entry(name.to_string())
            .or_insert_with(|| json!({}));
        if !v.is_object() {
            *v = json!({});
        }
        match v {
            Value::Object(m) => m,
            _ => unreachable!("just made an object"),
        }
    }

    /// `slice.field.nested`.
    pub fn path(&self, path: &str) -> Option<&Value> {
        let mut parts = path.split('.');
        let mut v = self.slices.get(parts.next()?)?;
        for p in parts {
            v = v.get(p)?;
        }
        Some(v)
    }

    /// `slice.field`, if present.
    pub fn get(&self, slice: &str, field: &str) -> Option<&Value> {
        self.slices.get(slice)?.get(field)
    }

    /// Sets `slice.field`, creating the slice if needed.
    pub fn set(&mut self, slice: &str, field: &str, value: Value) {
        self.slice_mut(slice).insert(field.into(), value);
    }

    /// Merges `fields` into `slice`.
    pub fn merge(&mut self, slice: &str, fields: Map<String, Value>) {
        let target = self.slice_mut(slice);
        for (k, v) in fields {
            target.insert(k, v);
        }
    }

    fn str_of(&self, slice: &str, field: &str) -> Option<String> {
        self.get(slice, field)
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    // _internal
    /// `_internal.turn_count`: requests so far (0 if unset).
    pub fn turn_count(&self) -> u64 {
        self.get(INTERNAL, "turn_count")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }
    /// `_internal.is_first_turn` (true if unset).
    pub fn is_first_turn(&self) -> bool {
        self.get(INTERNAL, "is_first_turn")
            .and_then(Value::as_bool)
            .unwrap_or(true)
    }
    /// `_internal.active_mode`.
    pub fn active_mode(&self) -> Option<String> {
        self.str_of(INTERNAL, "active_mode")
    }
    /// `_internal.next_node`: a target for explicit routing.
    pub fn next_node(&self) -> Option<String> {
        self.str_of(INTERNAL, "next_node")
    }
    /// Sets `_internal.next_node`, or null to clear it.
    pub fn set_next_node(&mut self, node: Option<&str>) {
        self.set(
            INTERNAL,
            "next_node",
            node.map(Value::from).unwrap_or(Value::Null),
        );
    }
    /// `_internal.error`: the last node failure.
    pub fn error(&self) -> Option<String> {
        self.str_of(INTERNAL, "error")
    }
    /// Counts a new request: bumps `turn_count`, clears `is_first_turn`.
    pub fn increment_turn(&mut self) {
        let n = self.turn_count() + 1;
        self.set(INTERNAL, "turn_count", n.into());
        self.set(INTERNAL, "is_first_turn", false.into());
    }
    /// Records a node failure in `_internal.error`.
    pub fn set_error(&mut self, message: &str) {
        self.set(INTERNAL, "error", message.into());
    }
    /// Removes `_internal.error`.
    pub fn clear_error(&mut self) {
        self.slice_mut(INTERNAL).remove("error");
    }

    // request
    /// `request.session_id`.
    pub fn session_id(&self) -> Option<String> {
        self.str_of(REQUEST, "session_id")
    }
    /// `request.action`.
    pub fn action(&self) -> Option<String> {
        self.str_of(REQUEST, "action")
    }
    /// `request.params`.
    pub fn params(&self) -> Option<&Value> {
        self.get(REQUEST, "params")
    }
    /// `request.message`.
    pub fn message(&self) -> Option<String> {
        self.str_of(REQUEST, "message")
    }
    /// `request.image`.
    pub fn image(&self) -> Option<String> {
        self.str_of(REQUEST, "image")
    }

    // response
    /// `response.response_type`.
    pub fn response_type(&self) -> Option<String> {
        self.str_of(RESPONSE, "response_type")
    }
    /// `response.response_data`.
    pub fn response_data(&self) -> Option<&Value> {
        self.get(RESPONSE, "response_data")
    }
    /// `response.response_message`.
    pub fn response_message(&self) -> Option<String> {
        self.str_of(RESPONSE, "response_message")
    }
    /// Clears the response (before a new request).
    pub fn reset_response(&mut self) {
        self.slices.insert(RESPONSE.into(), json!({}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors_and_helpers() {
        let mut s = State::new();
        assert!(s.is_first_turn());
        s.increment_turn();
        s.increment_turn();
        assert_eq!((s.turn_count(), s.is_first_turn()), (2, false));
        s.set_error("boom");
        assert_eq!(s.error().as_deref(), Some("boom"));
        s.clear_error();
        assert!(s.error().is_none());
        s.set(REQUEST, "params", json!({"query": {"text": "laptop"}}));
        assert_eq!(s.path("request.params.query.text"), Some(&json!("laptop")));
        s.set(RESPONSE, "response_type", "results".into());
        assert_eq!(s.response_type().as_deref(), Some("results"));
        s.reset_response();
        assert!(s.response_type().is_none());
        s.set_next_node(Some("search"));
        assert_eq!(s.next_node().as_deref(), Some("search"));
    }
}
