//! What the LLM router may see, exactly as agent-contracts' `sanitize_for_llm_util` writes
//! it: data URIs become `[DATA_URI:<mime>]`, JWTs `[JWT:<alg>]`, links to binary files
//! `[BINARY_URL]`, base64 runs `[BASE64_DATA:<kind>]` (the kind read from the decoded magic
//! bytes), hex runs `[HEX_DATA]`; other strings over the limit keep their head and end in
//! `...[TRUNCATED:<total length>]`. Lengths count characters, as Python does.

use crate::python::binascii::{b64decode, pad};
use crate::python::pyvalue::{is_py_space, py_str, py_strip};
use serde_json::Value;

/// Default longest string the router sees whole; longer ones are truncated.
pub const DEFAULT_MAX_FIELD_LENGTH: usize = 10_000;
/// Longer strings are not inspected at all.
pub const MAX_INPUT_LENGTH: usize = 10_000_000;
/// Base64 and hex runs shorter than this stay text.
const MIN_BINARY_LENGTH: usize = 128;

const MAGIC: &[(&[u8], &str)] = &[
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"PK\x05\x06", "application/zip"),
    (b"PK\x07\x08", "application/zip"),
    (b"\x1f\x8b\x08", "application/gzip"),
    (b"ID3", "audio/mpeg"),
];

const BINARY_EXTENSIONS: &[&str] = &[
    "png", "jpg", "jpeg", "gif", "webp", "bmp", "tif", "tiff", "avif", "pdf", "zip", "gz", "tar",
    "mp3", "mp4", "mov", "m4a", "wav", "webm",
];

/// Strings anywhere in `v` sanitised; keys and other values as they are.
pub fn sanitize(v: &Value, max_field_length: usize) -> Value {
    match v {
        Value::String(s) => Value::String(sanitize_str(s, max_field_length)),
        Value::Array(a) => Value::Array(a.iter().map(|x| sanitize(x, max_field_length)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), sanitize(x, max_field_length)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// One string as the LLM router may see it: data URIs, JWTs, binary links, base64, hex and
/// oversized input become placeholders; long text is truncated.
pub fn sanitize_str(raw: &str, max_field_length: usize) -> String {
    let len = raw.chars().count();
    if len > MAX_INPUT_LENGTH {
        return "[OVERSIZED_DATA]".into();
    }
    let s = py_strip(raw);
    if let Some((mime, end)) = data_uri(s) {
        let mut detail = mime;
        if s[..end].to_lowercase().contains("base64") {
            let payload = &s[end..];
            if !payload.is_empty() {
                if let Some(kind) = decode_prefix(payload, false).and_then(|p| magic(&p)) {
                    detail = Some(kind.to_string());
                }
            }
        }
        return match detail {
            Some(d) if !d.is_empty() => format!("[DATA_URI:{d}]"),
            _ => "[DATA_URI]".into(),
        };
    }
    if let Some(alg) = jwt_alg(s) {
        return format!("[JWT:{alg}]");
    }
    if is_binary_url(s) {
        return "[BINARY_URL]".into();
    }
    if let Some(urlsafe) = base64_kind(s) {
        return match decode_prefix(s, urlsafe).and_then(|p| magic(&p)) {
            Some(kind) => format!("[BASE64_DATA:{kind}]"),
            None => "[BASE64_DATA]".into(),
        };
    }
    if is_hex(s) {
        return "[HEX_DATA]".into();
    }
    if len > max_field_length {
        let head: String = raw.chars().take(max_field_length).collect();
        return format!("{head}...[TRUNCATED:{len}]");
    }
    raw.to_string()
}

/// Python's `\w` (Unicode) and `-.+`: the characters of a MIME type or parameter.
fn mime_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '+')
}

fn take_mime(s: &str) -> usize {
    s.char_indices()
        .find(|(_, c)| !mime_char(*c))
        .map_or(s.len(), |(i, _)| i)
}

/// `^data:(mime)?(;k=v)*(;base64)?,` case-insensitively: the MIME type and where the payload
/// starts.
fn data_uri(s: &str) -> Option<(Option<String>, usize)> {
    if !s.get(..5)?.eq_ignore_ascii_case("data:") {
        return None;
    }
    let rest = &s[5..];
    let mut pos = 0;
    let mut mime = None;
    let a = take_mime(rest);
    if a > 0 && rest[a..].starts_with('/') {
        let b = take_mime(&rest[a + 1..]);
        if b > 0 {
            mime = Some(rest[..a + 1 + b].to_lowercase());
            pos = a + 1 + b;
        }
    }
    // Parameters: `;name=value`, each all or nothing.
    while let Some(p) = rest[pos..].strip_prefix(';') {
        let n = take_mime(p);
        if n == 0 || !p[n..].starts_with('=') {
            break;
        }
        let v = take_mime(&p[n + 1..]);
        if v == 0 {
            break;
        }
        pos += 1 + n + 1 + v;
    }
    if rest
        .get(pos..pos + 7)
        .is_some_and(|t| t.eq_ignore_ascii_case(";base64"))
    {
        pos += 7;
    }
    rest[pos..].starts_with(',').then_some((mime, 5 + pos + 1))
}

/// The first bytes of base64 text (whitespace removed, padded), for the magic-byte check.
fn decode_prefix(s: &str, urlsafe: bool) -> Option<Vec<u8>> {
    if s.chars().count() > MAX_INPUT_LENGTH {
        return None;
    }
    let compact: String = py_strip(s).chars().filter(|c| !is_py_space(*c)).collect();
    // 88 characters decode to the 64 bytes the check looks at.
    let chunk: String = pad(&compact).chars().take(88).collect();
    let chunk = if urlsafe {
        chunk.replace('-', "+").replace('_', "/")
    } else {
        chunk
    };
    b64decode(&pad(&chunk), true).filter(|p| !p.is_empty())
}

fn magic(prefix: &[u8]) -> Option<&'static str> {
    if let Some((_, kind)) = MAGIC.iter().find(|(sig, _)| prefix.starts_with(sig)) {
        return Some(kind);
    }
    let within = |n: usize, needle: &[u8]| {
        prefix[..prefix.len().min(n)]
            .windows(needle.len())
            .any(|w| w == needle)
    };
    if prefix.starts_with(b"RIFF") && within(16, b"WEBP") {
        return Some("image/webp");
    }
    if within(32, b"ftyp") {
        return Some("video/mp4");
    }
    None
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// A JWT (three base64url parts) whose header is a JSON object with `alg`: `str(alg)`.
fn jwt_alg(s: &str) -> Option<String> {
    let t = py_strip(s);
    let parts: Vec<&str> = t.split('.').collect();
    if parts.len() != 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.chars().all(is_token_char))
    {
        return None;
    }
    let header = pad(parts[0]).replace('-', "+").replace('_', "/");
    let bytes = b64decode(&header, false)?;
    let text = String::from_utf8(bytes).ok()?;
    let obj: Value = serde_json::from_str(&text).ok()?;
    obj.as_object()?.get("alg").map(py_str)
}

/// `https?://…<.ext>(?query)` with a binary file extension, no whitespace.
fn is_binary_url(s: &str) -> bool {
    let lower_starts = |p: &str| s.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p));
    let rest = if lower_starts("http://") {
        &s[7..]
    } else if lower_starts("https://") {
        &s[8..]
    } else {
        return false;
    };
    if rest.is_empty() || rest.chars().any(is_py_space) {
        return false;
    }
    rest.char_indices()
        .filter(|(i, c)| *c == '.' && *i > 0)
        .any(|(i, _)| {
            let after = &rest[i + 1..];
            BINARY_EXTENSIONS.iter().any(|ext| {
                after
                    .get(..ext.len())
                    .is_some_and(|e| e.eq_ignore_ascii_case(ext))
                    && (after.len() == ext.len() || after[ext.len()..].starts_with('?'))
            })
        })
}

/// `[alphabet]+={0,2}` in full.
fn fits(s: &str, alphabet: impl Fn(char) -> bool) -> bool {
    let body = s.trim_end_matches('=');
    let pads = s.len() - body.len();
    !body.is_empty() && pads <= 2 && body.chars().all(alphabet)
}

/// Base64 (`Some(false)`) or base64url (`Some(true)`) of at least 128 characters that
/// Python's strict decoder accepts.
fn base64_kind(s: &str) -> Option<bool> {
    if s.chars().any(is_py_space) || s.chars().count() < MIN_BINARY_LENGTH {
        return None;
    }
    if fits(s, |c| c.is_ascii_alphanumeric() || c == '+' || c == '/') {
        return b64decode(&pad(s), true).map(|_| false);
    }
    if fits(s, is_token_char) {
        let b64 = s.replace('-', "+").replace('_', "/");
        return b64decode(&pad(&b64), true).map(|_| true);
    }
    None
}

fn is_hex(s: &str) -> bool {
    !s.chars().any(is_py_space)
        && s.len() >= MIN_BINARY_LENGTH
        && s.len().is_multiple_of(2)
        && s.chars().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn binary_data_is_named_and_long_text_cut() {
        let png = "iVBORw0KGgoAAAANSUhEUgAA".repeat(8);
        let v = json!({
            "image": format!("data:image/png;base64,{png}"),
            "plain": "data:text/plain,hello",
            "raw": png,
            "hex": "ab".repeat(64),
            "url": "https://x.org/cat.JPG?size=2",
            "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln",
            "text": "x".repeat(15),
            "short": "iVBORw0KGgo",
            "n": 3,
        });
        let s = sanitize(&v, 10);
        assert_eq!(s["image"], "[DATA_URI:image/png]");
        assert_eq!(s["plain"], "[DATA_URI:text/plain]");
        assert_eq!(s["raw"], "[BASE64_DATA:image/png]");
        assert_eq!(
            s["hex"], "[BASE64_DATA]",
            "hex digits are base64 digits too"
        );
        assert_eq!(s["url"], "[BINARY_URL]");
        assert_eq!(s["jwt"], "[JWT:HS256]");
        assert_eq!(s["text"], "xxxxxxxxxx...[TRUNCATED:15]");
        assert_eq!(s["short"], "iVBORw0KGg...[TRUNCATED:11]");
        assert_eq!(s["n"], 3);
        assert_eq!(
            sanitize_str(&format!("see {}", "a".repeat(200)), 300),
            format!("see {}", "a".repeat(200)),
            "text that merely contains a long run stays"
        );
        assert_eq!(sanitize_str(&"ab".repeat(65), 10), "[BASE64_DATA]");
        assert_eq!(
            sanitize_str(&"a ".repeat(MAX_INPUT_LENGTH / 2 + 1), 10),
            "[OVERSIZED_DATA]"
        );
        assert_eq!(sanitize_str(&"f".repeat(130), 10), "[BASE64_DATA]");
        assert_eq!(
            sanitize_str(&"f".repeat(129), 10),
            format!("{}...[TRUNCATED:129]", "f".repeat(10))
        );
    }
}
