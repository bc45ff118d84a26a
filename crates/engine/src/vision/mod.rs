//! Images in: the vision tower of Qwen3.5 / 3.6 / 3.8 (`model.visual.*`), the image
//! processor that feeds it, and the multimodal rotary positions of a prompt that holds
//! images.
//!
//! An image is decoded ([`Rgb`]), resized and cut into patches ([`ImageProcessor`]), and
//! encoded by the tower ([`VisionTower`]) into as many tokens of the language model's width
//! as the prompt holds `<|image_pad|>` tokens for it; the prompt's positions come from
//! [`mrope_positions`].

mod config;
mod positions;
mod processor;
mod resize;
mod tower;

pub use config::{ProcessorConfig, VisionConfig};
pub use positions::{mrope_positions, MropePositions};
pub use processor::{ImageInput, ImageProcessor, Rgb};
pub use resize::{resize_rgb, smart_resize};
pub use tower::{patch_coordinates, VisionTower};
