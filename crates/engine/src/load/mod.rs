//! Reading a model's files: [`source`] finds them (a directory, a `.gguf` file, a hub repo),
//! [`config`] reads the architecture, [`card`] holds the built-in model cards, [`weights`]
//! the safetensors tensors and [`gguf`] the GGUF container. [`crate::loader`] puts a model
//! together from them.

pub mod card;
pub mod config;
pub mod gguf;
pub mod source;
pub mod weights;
