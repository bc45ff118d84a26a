//! Ids of the real Qwen2.5 and Qwen3 tokenizers equal Python `tokenizers`' (golden by
//! crates/engine/tests/fixtures/generate.py); decoding gives the text back; streaming never splits a character.

mod common;

use common::*;
use hearth_engine::{StreamDecoder, Tokenizer};

fn corpus(name: &str) -> Vec<(String, Vec<u32>)> {
    let path = fixtures().join(format!("golden/tokenizer-{name}.json"));
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    rows.iter()
        .map(|r| {
            let ids = r["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            (r["text"].as_str().unwrap().to_string(), ids)
        })
        .collect()
}

#[test]
fn ids_match_python_tokenizers() {
    let Some(dir) = real_tokenizers() else { return };
    for name in ["qwen2.5", "qwen3"] {
        let tok = Tokenizer::from_file(&dir.join(name).join("tokenizer.json")).unwrap();
        let rows = corpus(name);
        assert!(rows.len() >= 50);
        for (text, ids) in &rows {
            assert_eq!(&tok.encode(text).unwrap(), ids, "{name}: {text:?}");
            assert_eq!(
                &tok.decode(ids).unwrap(),
                text,
                "{name}: decode(encode({text:?}))"
            );
        }
        assert_eq!(tok.token_id("<|im_end|>"), Some(151645));
    }
}

#[test]
fn streaming_decode_equals_full_decode() {
    let Some(dir) = real_tokenizers() else { return };
    let tok = Tokenizer::from_file(&dir.join("qwen3/tokenizer.json")).unwrap();
    for (text, ids) in corpus("qwen3") {
        let mut dec = StreamDecoder::new();
        let mut out = String::new();
        for &id in &ids {
            let piece = dec.push(&tok, id).unwrap();
            assert!(
                !piece.contains('\u{FFFD}'),
                "{text:?}: broken character streamed"
            );
            out.push_str(&piece);
        }
        out.push_str(&dec.flush(&tok).unwrap());
        assert_eq!(out, text);
    }
}

#[test]
fn streaming_holds_back_a_split_character() {
    // The tiny fixture tokenizer has only byte-level tokens for CJK: 你 is three byte tokens.
    let tok = Tokenizer::from_file(&tiny("qwen2").join("tokenizer.json")).unwrap();
    let ids = tok.encode("你好").unwrap();
    assert!(ids.len() >= 4, "{ids:?}");
    let mut dec = StreamDecoder::new();
    let pieces: Vec<String> = ids.iter().map(|&i| dec.push(&tok, i).unwrap()).collect();
    assert_eq!(pieces[0], "");
    assert_eq!(pieces.concat(), "你好");
    // A stream cut mid-character flushes what it has rather than losing it.
    let mut dec = StreamDecoder::new();
    assert_eq!(dec.push(&tok, ids[0]).unwrap(), "");
    assert!(!dec.flush(&tok).unwrap().is_empty());
}

#[test]
fn ids_that_never_complete_a_character_are_let_go() {
    // 你's last byte, again and again: never a whole character. The decoder lets the held
    // text go every few tokens (its window, re-decoded each token, stays short).
    let tok = Tokenizer::from_file(&tiny("qwen2").join("tokenizer.json")).unwrap();
    let ids = tok.encode("你").unwrap();
    let lone = *ids.last().unwrap();
    let mut dec = StreamDecoder::new();
    let mut since = 0;
    for _ in 0..1000 {
        since = if dec.push(&tok, lone).unwrap().is_empty() {
            since + 1
        } else {
            0
        };
        assert!(since < 8, "{since} tokens held");
    }
}

/// llama.cpp's own tokenizer tests (`test-tokenizer-0` on `models/ggml-vocab-*.gguf`): Hearth's
/// tokenizer built from each vocabulary-only GGUF gives llama.cpp's ids for every case, Qwen2's
/// pre-tokeniser and Qwen3.5's (whose letters take their combining marks).
#[test]
fn gguf_vocabularies_tokenize_as_llama_cpp_does() {
    let Some(dir) = common::llama_vocab() else {
        return;
    };
    for vocab in ["qwen2", "qwen35"] {
        let gguf = dir.join(format!("ggml-vocab-{vocab}.gguf"));
        let tok = hearth_engine::load::gguf::GgufFile::open(&gguf)
            .unwrap()
            .tokenizer()
            .unwrap();
        let read = |ext: &str| {
            std::fs::read_to_string(dir.join(format!("ggml-vocab-{vocab}.gguf.{ext}"))).unwrap()
        };
        // As test-tokenizer-0 reads them: texts between separators, one line of ids each.
        let inputs = read("inp");
        let inputs: Vec<&str> = inputs.split("\n__ggml_vocab_test__\n").collect();
        let outputs = read("out");
        let outputs: Vec<&str> = outputs.split('\n').collect();
        assert!(inputs.len() > 30, "{vocab}: {} cases", inputs.len());
        let mut checked = 0;
        for (text, ids) in inputs.iter().zip(&outputs) {
            let want: Vec<u32> = ids.split_whitespace().map(|i| i.parse().unwrap()).collect();
            let got = tok.encode(text).unwrap();
            assert_eq!(got, want, "{vocab}: {text:?}");
            checked += 1;
        }
        println!("{vocab}: {checked} cases as llama.cpp tokenizes them");
        assert_eq!(checked, inputs.len());
    }
}
