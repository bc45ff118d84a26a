//! Images in requests: each API's image part read into its bytes where the message text
//! keeps a placeholder, then, once the model is known, each image prepared for its tower and
//! each placeholder replaced by the text that stands for one image in the model's prompt.

use super::error::ApiError;
use base64::Engine as _;
use hearth_engine::vision::ImageInput;
use hearth_engine::{ChatMessage, Engine};

/// Where an image stood in a message's text until the model's marker replaces it (U+FFFC,
/// the object replacement character).
pub const PLACEHOLDER: char = '\u{FFFC}';

/// An image of a request: the field it came from, its bytes, and whether a tool's result
/// holds it (a screenshot a tool took: for a model without vision it becomes a note in the
/// text, where an image the user sent is refused).
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePart {
    /// The request field (`messages[0].content[1].image_url`).
    pub at: String,
    /// The encoded image.
    pub bytes: Vec<u8>,
    /// Whether a tool result holds it.
    pub from_tool: bool,
}

/// The images of one request, in order.
pub type Images = Vec<ImagePart>;

/// An image the user sent.
pub fn part(at: String, bytes: Vec<u8>) -> ImagePart {
    ImagePart {
        at,
        bytes,
        from_tool: false,
    }
}

/// What a model without vision reads in place of an image a tool returned.
pub const NO_VISION_NOTE: &str = "[an image: this model reads text only]";

/// The bytes of a `data:` URI (`data:image/png;base64,…`); an http(s) URL is refused (this
/// server fetches nothing).
pub fn data_uri(at: &str, url: &str) -> Result<Vec<u8>, ApiError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        return Err(ApiError::unsupported(
            at,
            "image URLs are not fetched (the server runs offline); send the image as a data URI (data:image/png;base64,…)",
        ));
    }
    let Some((head, data)) = url.strip_prefix("data:").and_then(|r| r.split_once(',')) else {
        return Err(ApiError::invalid(
            at,
            "expected a data URI (data:image/png;base64,…)",
        ));
    };
    if !head.ends_with(";base64") {
        return Err(ApiError::invalid(
            at,
            "the data URI must be base64 (`;base64,`)",
        ));
    }
    base64(at, data)
}

/// Base64 `data` decoded.
pub fn base64(at: &str, data: &str) -> Result<Vec<u8>, ApiError> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| ApiError::invalid(at, format!("not base64: {e}")))
}

/// A message's text built from its parts: text parts joined by line breaks, each image a
/// placeholder with nothing around it (as the chat templates write an image beside text).
#[derive(Default)]
pub struct PartsText {
    text: String,
    after_text: bool,
}

impl PartsText {
    /// Adds a text part.
    pub fn text(&mut self, t: &str) {
        if self.after_text {
            self.text.push('\n');
        }
        self.text.push_str(t);
        self.after_text = true;
    }

    /// Adds an image part.
    pub fn image(&mut self) {
        self.text.push(PLACEHOLDER);
        self.after_text = false;
    }

    /// The text.
    pub fn finish(self) -> String {
        self.text
    }
}

/// `messages` with each placeholder replaced by the model's image marker, and `images`
/// prepared for its tower: a model without vision, or an image it cannot read, is a 400
/// that names the image's field.
pub fn prepare(
    engine: &Engine,
    messages: &[ChatMessage],
    images: &Images,
) -> Result<(Vec<ChatMessage>, Vec<ImageInput>), ApiError> {
    if images.is_empty() {
        return Ok((messages.to_vec(), vec![]));
    }
    let replaced = |with: &str| {
        let mut out = messages.to_vec();
        for m in &mut out {
            if let Some(c) = &mut m.content {
                if c.contains(PLACEHOLDER) {
                    *c = c.replace(PLACEHOLDER, with);
                }
            }
        }
        out
    };
    let Some(support) = &engine.info().images else {
        // Tools' screenshots become a note; an image the user sent is refused.
        return match images.iter().find(|i| !i.from_tool) {
            None => Ok((replaced(NO_VISION_NOTE), vec![])),
            Some(user) => Err(ApiError::unsupported(
                &user.at,
                format!(
                    "{} takes text only (no vision tower): images are refused",
                    engine.info().origin
                ),
            )),
        };
    };
    let prepared = images
        .iter()
        .map(|i| {
            engine
                .image(&i.bytes)
                .map_err(|e| ApiError::invalid(&i.at, e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((replaced(&support.marker), prepared))
}
