//! Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the
//! status a client expects: 400 for what the request got wrong, 401, 404, 503, 500.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::EngineError;
use serde_json::json;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// The request is wrong at `param` (`messages[2].role`, `temperature`, …).
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
            code: None,
        }
    }

    /// A valid request for something Hearth does not do.
    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        Self {
            code: Some("unsupported_parameter"),
            ..Self::invalid(param, message)
        }
    }

    pub fn bad_body(message: impl Into<String>) -> Self {
        Self {
            param: None,
            ..Self::invalid("", message)
        }
    }

    pub fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message: "invalid or missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`".into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    pub fn not_found(what: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("no route {what}"),
            kind: "not_found_error",
            param: None,
            code: None,
        }
    }

    pub fn method_not_allowed() -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "method not allowed on this route".into(),
            kind: "invalid_request_error",
            param: None,
            code: None,
        }
    }

    pub fn too_large(limit: usize) -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("request body over {limit} bytes"),
            kind: "invalid_request_error",
            param: None,
            code: None,
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match &e {
            EngineError::InvalidArgument { arg, .. } => Self::invalid(*arg, e.to_string()),
            // Anthropic's words, which Claude Code reads to compact the conversation; OpenAI's
            // clients (Codex) read the code.
            EngineError::PromptTooLong { len, max } => Self {
                code: Some("context_length_exceeded"),
                ..Self::invalid(
                    "messages",
                    format!("prompt is too long: {len} tokens > {max} maximum"),
                )
            },
            // Templates reject conversations they cannot render (roles out of order, …).
            EngineError::Template { .. } => Self::invalid("messages", e.to_string()),
            EngineError::QueueFull { .. } => Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: e.to_string(),
                kind: "unavailable_error",
                param: None,
                code: Some("queue_full"),
            },
            _ => Self::internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        with_retry_after(
            self.status,
            (self.status, Json(self.body())).into_response(),
        )
    }
}

fn with_retry_after(status: StatusCode, mut response: Response) -> Response {
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // The queue drains a sequence at a time: worth trying again shortly.
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    response
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.param {
            Some(p) if !p.is_empty() => write!(f, "{p}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

/// An error in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`, for
/// `/v1/messages`: the same status, the type Anthropic's clients read from it.
pub struct AnthropicError(pub ApiError);

impl AnthropicError {
    pub fn body(&self) -> serde_json::Value {
        let kind = match self.0.status.as_u16() {
            400 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 => "overloaded_error",
            _ => "api_error",
        };
        let message = match self.0.code {
            // As Anthropic words it, without the field in front.
            Some("context_length_exceeded") => self.0.message.clone(),
            _ => self.0.to_string(),
        };
        json!({"type": "error", "error": {"type": kind, "message": message}})
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        with_retry_after(
            self.0.status,
            (self.0.status, Json(self.body())).into_response(),
        )
    }
}
