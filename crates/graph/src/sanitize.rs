//! What the LLM router may see: image data and long base64/hex runs become `[IMAGE_DATA]`,
//! strings over `max_field_length` keep their head and say how much was cut.

use serde_json::Value;

pub const DEFAULT_MAX_FIELD_LENGTH: usize = 10_000;

fn looks_like_image(s: &str) -> bool {
    let t = s.trim_start();
    if t.starts_with("data:image")
        || t.starts_with("iVBORw0KGgo")
        || t.starts_with("/9j/")
        || t.starts_with("R0lGOD")
    {
        return true;
    }
    // A run of 128+ base64 or hex characters.
    let mut run = 0;
    for c in t.chars() {
        if c.is_ascii_alphanumeric() || c == '+' || c == '/' || c == '=' {
            run += 1;
            if run >= 128 {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

pub fn sanitize(v: &Value, max_field_length: usize) -> Value {
    match v {
        Value::String(s) if looks_like_image(s) => Value::String("[IMAGE_DATA]".into()),
        Value::String(s) if s.chars().count() > max_field_length => {
            let head: String = s.chars().take(max_field_length).collect();
            let cut = s.chars().count() - max_field_length;
            Value::String(format!("{head}...[TRUNCATED:{cut}_chars]"))
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| sanitize(x, max_field_length)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), sanitize(x, max_field_length)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn images_and_long_fields() {
        let b64 = "A".repeat(200);
        let v = json!({"image": format!("data:image/png;base64,{b64}"), "raw": b64, "png": "iVBORw0KGgoAAAA",
                       "text": "x".repeat(15), "short": "hello world"});
        let s = sanitize(&v, 10);
        assert_eq!(s["image"], "[IMAGE_DATA]");
        assert_eq!(s["raw"], "[IMAGE_DATA]");
        assert_eq!(s["png"], "[IMAGE_DATA]");
        assert_eq!(s["text"], "xxxxxxxxxx...[TRUNCATED:5_chars]");
        assert_eq!(s["short"], "hello worl...[TRUNCATED:1_chars]");
        assert_eq!(
            sanitize(&json!({"a": "ok"}), DEFAULT_MAX_FIELD_LENGTH),
            json!({"a": "ok"})
        );
    }
}
