//! Base64 decoding with Python 3.11's `binascii.a2b_base64` rules, strict and lenient: the
//! sanitiser must call the same strings base64 as agent-contracts does, and Python accepts
//! and refuses paddings in its own way.

/// The value of a base64 digit of the standard alphabet.
fn digit(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// `base64.b64decode(text, validate=strict)`; `None` where Python raises. Non-ASCII text is
/// refused as Python's `ValueError`; lenient decoding skips characters outside the alphabet.
pub fn b64decode(text: &str, strict: bool) -> Option<Vec<u8>> {
    if !text.is_ascii() {
        return None;
    }
    let data = text.as_bytes();
    if strict && data.first() == Some(&b'=') {
        return None;
    }
    let mut out = Vec::with_capacity(data.len() / 4 * 3 + 3);
    let (mut quad, mut left, mut pads) = (0u8, 0u8, 0u8);
    let mut padding_started = false;
    for (i, &b) in data.iter().enumerate() {
        if b == b'=' {
            padding_started = true;
            if quad >= 2 {
                pads += 1;
                if quad + pads >= 4 {
                    // A complete pad sequence ends the input.
                    if strict && i + 1 < data.len() {
                        return None;
                    }
                    return Some(out);
                }
            }
            continue;
        }
        let Some(v) = digit(b) else {
            if strict {
                return None;
            }
            continue;
        };
        if strict && padding_started {
            return None;
        }
        pads = 0;
        match quad {
            0 => {
                quad = 1;
                left = v;
            }
            1 => {
                quad = 2;
                out.push((left << 2) | (v >> 4));
                left = v & 0x0f;
            }
            2 => {
                quad = 3;
                out.push((left << 4) | (v >> 2));
                left = v & 0x03;
            }
            _ => {
                quad = 0;
                out.push((left << 6) | v);
                left = 0;
            }
        }
    }
    (quad == 0).then_some(out)
}

/// Pads with `=` to a multiple of four characters (agent-contracts' `_add_b64_padding`).
pub fn pad(s: &str) -> String {
    let n = s.chars().count();
    format!("{s}{}", "=".repeat((4 - n % 4) % 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_padding_rules() {
        assert_eq!(b64decode("aGk=", true), Some(b"hi".to_vec()));
        assert_eq!(b64decode("aGk", true), None, "incorrect padding");
        assert_eq!(b64decode("aGk==", true), None, "excess data after padding");
        assert_eq!(b64decode("aGk==", false), Some(b"hi".to_vec()));
        assert_eq!(b64decode("a===", true), None);
        assert_eq!(
            b64decode("aGVs=", true),
            Some(b"hel".to_vec()),
            "Python 3.11 allows it"
        );
        assert_eq!(b64decode("aGVs=bG8h", true), None, "discontinuous padding");
        assert_eq!(b64decode("=aGk", true), None);
        assert_eq!(b64decode("aG!k=", true), None);
        assert_eq!(b64decode("aG!k=", false), Some(b"hi".to_vec()));
        assert_eq!(b64decode("é", false), None);
        assert_eq!(pad("abcde"), "abcde===");
    }
}
