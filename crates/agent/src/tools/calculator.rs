//! Arithmetic, exact on integers: `+ - * / %`, `^` and `**` (both power, as people and small
//! models write it), parentheses, unary minus, and sqrt/abs.

use crate::tool::{schema_of, Tool};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

/// A calculator's result: an exact integer or a float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// An exact integer.
    Int(i128),
    /// A float (decimals, inexact division, roots).
    Float(f64),
}

impl Number {
    fn f(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

impl std::fmt::Display for Number {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Number::Int(i) => write!(f, "{i}"),
            Number::Float(x) if x.fract() == 0.0 && x.abs() < 1e15 => write!(f, "{}", *x as i64),
            Number::Float(x) => {
                let s = format!("{x:.12}");
                write!(f, "{}", s.trim_end_matches('0').trim_end_matches('.'))
            }
        }
    }
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    depth: usize,
}

/// Nesting (parentheses, signs, exponents) the parser follows; deeper input is refused
/// rather than overflowing the stack.
const MAX_DEPTH: usize = 256;

type R = Result<Number, String>;

impl Parser<'_> {
    fn skip(&mut self) {
        while self.pos < self.src.len() && self.src[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip();
        if self.src[self.pos..].starts_with(s.as_bytes()) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    // expr := term (('+'|'-') term)*
    fn expr(&mut self) -> R {
        let mut v = self.term()?;
        loop {
            if self.eat("+") {
                v = arith(v, self.term()?, '+')?;
            } else if self.eat("-") {
                v = arith(v, self.term()?, '-')?;
            } else {
                return Ok(v);
            }
        }
    }

    // term := unary (('*'|'/'|'%'|'×'|'÷') unary)*   ('**' is power, handled below)
    fn term(&mut self) -> R {
        let mut v = self.unary()?;
        loop {
            self.skip();
            let rest = &self.src[self.pos..];
            let (op, len) = if rest.starts_with(b"**") {
                return Ok(v);
            } else if rest.starts_with("×".as_bytes()) {
                ('*', 2)
            } else if rest.starts_with("÷".as_bytes()) {
                ('/', 2)
            } else {
                match rest.first() {
                    Some(&c @ (b'*' | b'/' | b'%')) => (c as char, 1),
                    _ => return Ok(v),
                }
            };
            self.pos += len;
            v = arith(v, self.unary()?, op)?;
        }
    }

    // unary := '-' unary | power
    // Every level of recursion passes through here, so the depth is counted here.
    fn unary(&mut self) -> R {
        if self.depth >= MAX_DEPTH {
            return Err(format!(
                "expression nested more than {MAX_DEPTH} levels deep (parentheses, signs or powers) at position {}",
                self.pos
            ));
        }
        self.depth += 1;
        let v = self.unary_inner();
        self.depth -= 1;
        v
    }

    fn unary_inner(&mut self) -> R {
        if self.eat("-") {
            return match self.unary()? {
                // -i128::MIN does not fit: it goes on as a float.
                Number::Int(i) => Ok(i
                    .checked_neg()
                    .map_or(Number::Float(-(i as f64)), Number::Int)),
                Number::Float(f) => Ok(Number::Float(-f)),
            };
        }
        if self.eat("+") {
            return self.unary();
        }
        self.power()
    }

    // power := atom (('^'|'**') unary)?   (right-associative)
    fn power(&mut self) -> R {
        let base = self.atom()?;
        if self.eat("**") || self.eat("^") {
            let exp = self.unary()?;
            return pow(base, exp);
        }
        Ok(base)
    }

    fn atom(&mut self) -> R {
        if self.eat("(") {
            let v = self.expr()?;
            if !self.eat(")") {
                return Err(format!("missing `)` at position {}", self.pos));
            }
            return Ok(v);
        }
        for (name, f) in [("sqrt", f64::sqrt as fn(f64) -> f64), ("abs", f64::abs)] {
            if self.eat(name) {
                if !self.eat("(") {
                    return Err(format!("`{name}` needs parentheses"));
                }
                let v = self.expr()?;
                if !self.eat(")") {
                    return Err(format!("missing `)` after {name}("));
                }
                return Ok(match (name, v) {
                    ("abs", Number::Int(i)) => {
                        i.checked_abs().map_or(Number::Float(f(v.f())), Number::Int)
                    }
                    ("sqrt", Number::Int(i)) if i >= 0 && i.isqrt().pow(2) == i => {
                        Number::Int(i.isqrt())
                    }
                    _ => Number::Float(f(v.f())),
                });
            }
        }
        self.skip();
        let start = self.pos;
        while self.pos < self.src.len()
            && (self.src[self.pos].is_ascii_digit() || b"._,".contains(&self.src[self.pos]))
        {
            self.pos += 1;
        }
        let text: String =
            String::from_utf8_lossy(&self.src[start..self.pos]).replace(['_', ','], "");
        if text.is_empty() {
            return Err(match self.src.get(self.pos) {
                Some(_) => format!(
                    "unexpected `{}` at position {}",
                    String::from_utf8_lossy(&self.src[self.pos..])
                        .chars()
                        .next()
                        .unwrap_or('?'),
                    self.pos
                ),
                None => "unexpected end of expression".into(),
            });
        }
        if text.contains('.') {
            text.parse::<f64>()
                .map(Number::Float)
                .map_err(|_| format!("bad number `{text}`"))
        } else {
            text.parse::<i128>()
                .map(Number::Int)
                .map_err(|_| format!("number `{text}` is too large"))
        }
    }
}

fn arith(a: Number, b: Number, op: char) -> R {
    if let (Number::Int(x), Number::Int(y)) = (a, b) {
        let exact = match op {
            '+' => x.checked_add(y),
            '-' => x.checked_sub(y),
            '*' => x.checked_mul(y),
            '/' if y == 0 => return Err("division by zero".into()),
            // i128::MIN / -1 overflows: checked, it goes on as a float.
            '/' if x.checked_rem(y) == Some(0) => x.checked_div(y),
            '/' => None,
            '%' if y == 0 => return Err("division by zero".into()),
            '%' if y == -1 => Some(0),
            '%' => x.checked_rem_euclid(y),
            _ => None,
        };
        if let Some(v) = exact {
            return Ok(Number::Int(v));
        }
        if op != '/' {
            return Err("integer result too large".into());
        }
    }
    let (x, y) = (a.f(), b.f());
    let v = match op {
        '+' => x + y,
        '-' => x - y,
        '*' => x * y,
        '/' if y == 0.0 => return Err("division by zero".into()),
        '/' => x / y,
        '%' => x.rem_euclid(y),
        _ => return Err(format!("unknown operator `{op}`")),
    };
    Ok(Number::Float(v))
}

fn pow(a: Number, b: Number) -> R {
    if let (Number::Int(x), Number::Int(y)) = (a, b) {
        if (0..=u32::MAX as i128).contains(&y) {
            return x
                .checked_pow(y as u32)
                .map(Number::Int)
                .ok_or_else(|| "integer result too large".into());
        }
    }
    Ok(Number::Float(a.f().powf(b.f())))
}

/// Evaluates an arithmetic expression.
pub fn evaluate(expression: &str) -> Result<Number, String> {
    let mut p = Parser {
        src: expression.as_bytes(),
        pos: 0,
        depth: 0,
    };
    let v = p.expr()?;
    p.skip();
    if p.pos != p.src.len() {
        return Err(format!(
            "unexpected `{}` at position {}",
            String::from_utf8_lossy(&p.src[p.pos..]),
            p.pos
        ));
    }
    if let Number::Float(f) = v {
        if !f.is_finite() {
            return Err("the result is not a finite number".into());
        }
    }
    Ok(v)
}

/// The `calculator` tool: [`evaluate`] on its `expression` argument.
pub struct Calculator;

#[derive(Deserialize, schemars::JsonSchema)]
struct CalculatorArgs {
    /// An arithmetic expression, e.g. `1234 * 5678` or `(2 + 3) ^ 2`.
    #[allow(dead_code)]
    expression: String,
}

#[async_trait]
impl Tool for Calculator {
    fn name(&self) -> &str {
        "calculator"
    }
    fn description(&self) -> &str {
        "Evaluate an arithmetic expression exactly (+ - * / % and ^ or ** for powers, parentheses)."
    }
    fn parameters(&self) -> Value {
        schema_of::<CalculatorArgs>()
    }
    async fn call(&self, args: Value) -> Result<String, String> {
        let expr = args["expression"]
            .as_str()
            .ok_or("`expression` must be a string")?;
        evaluate(expr).map(|n| n.to_string())
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;

    fn ev(s: &str) -> String {
        evaluate(s)
            .map(|n| n.to_string())
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn exact_integers_and_both_power_spellings() -> TestResult {
        assert_eq!(ev("1234 * 5678"), "7006652");
        assert_eq!(ev("2^10"), "1024");
        assert_eq!(ev("2**10"), "1024");
        assert_eq!(ev("2 ** 3 ** 2"), "512", "right-associative");
        assert_eq!(ev("-2^2"), "-4");
        assert_eq!(ev("(2+3)*4 - 10 % 3"), "19");
        assert_eq!(ev("12345678901234567890 * 10"), "123456789012345678900");
        assert_eq!(ev("7 / 2"), "3.5");
        assert_eq!(ev("8 / 2"), "4");
        assert_eq!(ev("0.1 + 0.2"), "0.3");
        assert_eq!(ev("sqrt(144) + abs(-3)"), "15");
        assert_eq!(ev("1,000 × 3"), "3000");
        Ok(())
    }

    #[test]
    fn bad_expressions_are_errors_not_panics() -> TestResult {
        assert!(ev("1 / 0").contains("division by zero"));
        assert!(ev("2 +").contains("end of expression"));
        assert!(ev("(1 + 2").contains("missing `)`"));
        assert!(ev("rm -rf /").starts_with("error"));
        assert!(ev("10 ^ 100").contains("too large"));
        assert!(ev("").starts_with("error"));
        Ok(())
    }

    #[test]
    fn the_integer_limits_neither_panic_nor_hang() -> TestResult {
        let min = "(-170141183460469231731687303715884105727 - 1)";
        // The largest i128: not a square; its float root, squared, overflows i128.
        assert_eq!(
            ev("sqrt(170141183460469231731687303715884105727)"),
            ev("sqrt(170141183460469231731687303715884105727.0)")
        );
        assert_eq!(
            ev("sqrt(85070591730234615865843651857942052864)"),
            "9223372036854775808"
        );
        assert_eq!(
            ev(&format!("{min} / -1")),
            ev("170141183460469231731687303715884105728.0")
        );
        assert_eq!(ev(&format!("{min} % -1")), "0");
        assert_eq!(ev(&format!("-{min}")), ev(&format!("abs({min})")));
        assert_eq!(
            ev(&format!("-{min}")),
            ev("170141183460469231731687303715884105728.0")
        );
        assert_eq!(
            ev(&format!("{min} * 1")),
            "-170141183460469231731687303715884105728"
        );
        Ok(())
    }

    #[tokio::test]
    async fn deep_nesting_is_an_error_not_a_stack_overflow() -> TestResult {
        for deep in [
            "(".repeat(100_000),
            format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000)),
            format!("{}1", "-".repeat(100_000)),
            format!("{}1", "+".repeat(100_000)),
            format!("2{}", "^2".repeat(100_000)),
            format!("{}1{}", "sqrt(".repeat(100_000), ")".repeat(100_000)),
        ] {
            let err = Calculator
                .call(serde_json::json!({ "expression": deep }))
                .await
                .unwrap_err();
            assert!(err.contains("nested more than 256 levels"), "{err}");
        }
        // Nesting within the limit still works.
        assert_eq!(ev(&format!("{}7{}", "(".repeat(200), ")".repeat(200))), "7");
        assert_eq!(ev(&format!("{}7", "-".repeat(200))), "7");
        Ok(())
    }

    #[tokio::test]
    async fn the_tool_reads_its_schema_argument() -> TestResult {
        let schema = Calculator.parameters();
        assert_eq!(schema["required"], serde_json::json!(["expression"]));
        assert_eq!(
            Calculator
                .call(serde_json::json!({"expression": "6*7"}))
                .await?,
            "42"
        );
        Ok(())
    }
}
