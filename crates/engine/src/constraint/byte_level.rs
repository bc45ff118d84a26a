//! GPT-2's byte-level alphabet: byte-level BPE vocabularies (Qwen's among them) spell every
//! byte as a printable character, so `Ġ` is a space and `Ċ` a newline. Grammars work on raw
//! bytes, so each token's string is mapped back through this table.

/// The byte each of the 256 alphabet characters stands for, indexed by character.
pub struct ByteLevel {
    /// `bytes[c]` for characters below U+0144 (the alphabet's last), `None` elsewhere.
    bytes: Vec<Option<u8>>,
}

impl Default for ByteLevel {
    fn default() -> Self {
        Self::new()
    }
}

impl ByteLevel {
    /// The table of `bytes_to_unicode` in GPT-2's encoder: printable Latin-1 bytes stand for
    /// themselves, the others take the characters from U+0100 on, in byte order.
    pub fn new() -> Self {
        let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let mut bytes = vec![None; 0x100 + 0x100];
        let mut next = 0x100usize;
        for b in 0..=255u8 {
            if printable(b) {
                bytes[b as usize] = Some(b);
            } else {
                bytes[next] = Some(b);
                next += 1;
            }
        }
        bytes.truncate(next);
        Self { bytes }
    }

    /// The raw bytes of a vocabulary entry, `None` if a character is outside the alphabet
    /// (the entry is not byte-level).
    pub fn decode(&self, token: &str) -> Option<Vec<u8>> {
        token
            .chars()
            .map(|c| self.bytes.get(c as usize).copied().flatten())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_the_alphabet_back_to_bytes() {
        let t = ByteLevel::new();
        assert_eq!(t.decode("Ġhello"), Some(b" hello".to_vec()));
        assert_eq!(t.decode("Ċ"), Some(b"\n".to_vec()));
        assert_eq!(t.decode("{\""), Some(b"{\"".to_vec()));
        // "é" in UTF-8 is C3 A9, spelled Ã© in the alphabet.
        assert_eq!(t.decode("Ã©"), Some("é".as_bytes().to_vec()));
        assert_eq!(t.decode("€"), None);
        // All 256 bytes have exactly one character.
        let all: std::collections::BTreeSet<u8> = t.bytes.iter().flatten().copied().collect();
        assert_eq!(all.len(), 256);
        assert_eq!(t.bytes.iter().flatten().count(), 256);
    }
}
