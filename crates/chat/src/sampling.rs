//! How to pick each next token: the parameters; the engine's sampler applies them.

/// A parameter out of its range: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidParam {
    /// The parameter's name (`temperature`, `top_p`, …).
    pub arg: &'static str,
    /// The value and the range it must lie in.
    pub message: String,
}

impl InvalidParam {
    fn new(arg: &'static str, message: impl Into<String>) -> Self {
        Self {
            arg,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for InvalidParam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid {}: {}", self.arg, self.message)
    }
}

impl std::error::Error for InvalidParam {}

/// How to pick each next token; the default is greedy.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens.
    pub top_k: Option<usize>,
    /// Keep the most likely tokens whose probabilities sum to `top_p`.
    pub top_p: Option<f32>,
    /// Drop tokens less likely than `min_p` times the most likely one.
    pub min_p: Option<f32>,
    /// 1.0 means none; HF semantics (positive logits divided, negative multiplied).
    pub repetition_penalty: f32,
    /// How many of the most recent tokens the penalty looks at.
    pub repetition_window: usize,
    /// Seed of the random generator: the same seed gives the same tokens.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            min_p: None,
            repetition_penalty: 1.0,
            repetition_window: 64,
            seed: 299_792_458,
        }
    }
}

impl SamplingParams {
    /// Always the most likely token (the default).
    pub fn greedy() -> Self {
        Self::default()
    }

    /// Refuses out-of-range values, naming the field.
    pub fn validate(&self) -> Result<(), InvalidParam> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(InvalidParam::new(
                "temperature",
                format!("{} (must be 0 for greedy, or positive)", self.temperature),
            ));
        }
        if self.top_k == Some(0) {
            return Err(InvalidParam::new("top_k", "0 (must be at least 1)"));
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(InvalidParam::new(
                    "top_p",
                    format!("{p} (must be in (0, 1])"),
                ));
            }
        }
        if let Some(p) = self.min_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(InvalidParam::new(
                    "min_p",
                    format!("{p} (must be in [0, 1])"),
                ));
            }
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(InvalidParam::new(
                "repetition_penalty",
                format!("{} (must be positive)", self.repetition_penalty),
            ));
        }
        Ok(())
    }

    /// Whether sampling reduces to argmax (temperature 0 or `top_k` 1).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == Some(1)
    }
}
