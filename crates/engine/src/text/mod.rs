//! Text and token ids: the tokenizer with its streaming decoder, and the scan for stop strings
//! across token boundaries.

pub mod stop;
pub mod tokenizer;
