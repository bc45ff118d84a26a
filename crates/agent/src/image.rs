//! Images inside an agent's text. A user's picture or a tool's screenshot travels through
//! memory, aggregators, parsers and recordings as one span of text — a `data:` URI between two
//! U+FFFC (object replacement) characters — so that every layer that moves text moves it
//! unchanged; the model backends take it out again ([`pieces`]): the local engine encodes it
//! for a model with vision, a remote server gets an image part.
//!
//! A span that does not hold a base64 `data:image/…` URI is text like any other (a model
//! may write U+FFFC).

use base64::Engine as _;

/// What opens and closes an image's span.
pub const MARK: char = '\u{FFFC}';

/// What a model without vision reads in an image's place.
pub const TEXT_ONLY_NOTE: &str = "[an image: this model reads text only]";

/// The span of an image of `media_type` (`image/png`, …) whose file is `bytes`.
pub fn inline(bytes: &[u8], media_type: &str) -> String {
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    inline_base64(&data, media_type)
}

/// The span of an image given as base64 already (as MCP's image content is).
pub fn inline_base64(data: &str, media_type: &str) -> String {
    format!("{MARK}data:{media_type};base64,{data}{MARK}")
}

/// The span of the image file at `path`, its type from its first bytes; an error names the
/// file.
pub fn inline_file(path: &std::path::Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let media_type = media_type(&bytes)
        .ok_or_else(|| format!("{}: not a PNG, JPEG, WebP or GIF image", path.display()))?;
    Ok(inline(&bytes, media_type))
}

/// The media type of an image file from its first bytes: PNG, JPEG, WebP or GIF.
pub fn media_type(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x89, b'P', b'N', b'G', ..] => Some("image/png"),
        [0xFF, 0xD8, 0xFF, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', ..] => Some("image/gif"),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
        _ => None,
    }
}

/// A piece of a text that may hold images.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece<'a> {
    /// Text.
    Text(&'a str),
    /// An image: its media type, its file's bytes and its span as written (a `data:` URI
    /// between marks).
    Image {
        /// `image/png`, ….
        media_type: &'a str,
        /// The decoded file.
        bytes: Vec<u8>,
        /// The `data:` URI.
        uri: &'a str,
    },
}

/// Whether `text` holds an image's span.
pub fn has_images(text: &str) -> bool {
    pieces(text)
        .iter()
        .any(|p| matches!(p, Piece::Image { .. }))
}

/// `text` as text and images, in order (adjacent text in one piece).
pub fn pieces(text: &str) -> Vec<Piece<'_>> {
    let mut out = vec![];
    let (mut from, mut at) = (0, 0);
    while let Some(open) = text[at..].find(MARK).map(|i| at + i) {
        let inner = open + MARK.len_utf8();
        let Some(close) = text[inner..].find(MARK).map(|i| inner + i) else {
            break;
        };
        match image(&text[inner..close]) {
            Some((media_type, bytes)) => {
                if from < open {
                    out.push(Piece::Text(&text[from..open]));
                }
                out.push(Piece::Image {
                    media_type,
                    bytes,
                    uri: &text[inner..close],
                });
                at = close + MARK.len_utf8();
                from = at;
            }
            // Not an image: the first mark is text, the second may open one.
            None => at = close,
        }
    }
    if from < text.len() {
        out.push(Piece::Text(&text[from..]));
    }
    out
}

/// The media type and bytes of a `data:image/…;base64,…` URI.
fn image(uri: &str) -> Option<(&str, Vec<u8>)> {
    let (media_type, data) = uri.strip_prefix("data:")?.split_once(";base64,")?;
    if !media_type.starts_with("image/") {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .ok()?;
    Some((media_type, bytes))
}

/// `text` with each image replaced by `f(media type, bytes)`.
pub fn replace_images(text: &str, mut f: impl FnMut(&str, Vec<u8>) -> String) -> String {
    let mut out = String::with_capacity(text.len().min(4096));
    for p in pieces(text) {
        match p {
            Piece::Text(t) => out.push_str(t),
            Piece::Image {
                media_type, bytes, ..
            } => out.push_str(&f(media_type, bytes)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 1, 2, 3];

    #[test]
    fn an_image_goes_through_text_and_comes_out_whole() {
        let text = format!(
            "Look {} and {}.",
            inline(PNG, "image/png"),
            inline(b"GIF89a", "image/gif")
        );
        let p = pieces(&text);
        assert_eq!(p.len(), 5, "{p:?}");
        assert_eq!(p[0], Piece::Text("Look "));
        assert!(
            matches!(&p[1], Piece::Image { media_type: "image/png", bytes, .. } if bytes == PNG)
        );
        assert_eq!(p[2], Piece::Text(" and "));
        assert!(matches!(
            &p[3],
            Piece::Image {
                media_type: "image/gif",
                ..
            }
        ));
        assert_eq!(p[4], Piece::Text("."));
        assert!(has_images(&text));
        let noted = replace_images(&text, |t, b| format!("<{t}:{}>", b.len()));
        assert_eq!(noted, "Look <image/png:7> and <image/gif:6>.");
        assert_eq!(media_type(PNG), Some("image/png"));
        assert_eq!(media_type(b"hello"), None);
    }

    #[test]
    fn marks_around_anything_else_are_text() {
        for text in [
            format!("a {MARK}b{MARK} c"),
            format!("{MARK}data:text/plain;base64,aGk={MARK}"),
            format!("{MARK}data:image/png;base64,!!{MARK}"),
            format!("only one {MARK} mark"),
        ] {
            assert_eq!(pieces(&text), vec![Piece::Text(&text)], "{text:?}");
            assert!(!has_images(&text));
        }
        // A stray mark before a real image does not hide it.
        let text = format!("x{MARK}y {}", inline(PNG, "image/png"));
        let p = pieces(&text);
        assert!(matches!(p.last(), Some(Piece::Image { .. })), "{p:?}");
        assert_eq!(
            p[0],
            Piece::Text(&text[..text.len() - inline(PNG, "image/png").len()])
        );
    }
}
