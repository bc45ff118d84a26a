//! A custom tool's own grammar inside the call grammar. The Responses API's `custom` tools
//! (Codex's `apply_patch`) take free text held to a Lark grammar; Hearth offers such a tool
//! as a function of one string, `input`, and decodes that string under the client's grammar.
//!
//! In a JSON call the input sits inside a JSON string, so every terminal is respelled as
//! the JSON-escaped form of what it matched (`"\n"` becomes the two characters `\n`, a regex
//! class that admits `"` admits `\"` instead). JSON's escapes are a prefix code, so the
//! escaped terminals lex as the raw ones did, and the decoded string is a sentence of the
//! client's grammar. In an XML call the input is raw text and only the rules are renamed.
//! Rules and terminals are renamed under a prefix so that several grammars and the call
//! grammar around them cannot clash.

use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir, HirKind, Repetition};

/// How the input is spelled in the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spelling {
    /// Inside a JSON string, as `json.dumps` escapes it.
    Json,
    /// As it is.
    Raw,
}

/// The rules of the Lark `grammar` under `prefix`; its entry is `{prefix}_start`. Raw, the
/// rules are the grammar's, renamed. Inside a JSON string the grammar must be regular (no
/// rule reaches itself): it becomes one regex over the escaped text. Escaped terminals
/// would not lex as the raw ones do, since llguidance ends a terminal only where the next
/// byte cannot extend it, and every escape starts with the same byte (`\`). The error says
/// what could not be embedded.
pub(crate) fn embed(grammar: &str, prefix: &str, spelling: Spelling) -> Result<String, String> {
    let tokens = tokens(&expand_imports(grammar)?)?;
    match spelling {
        Spelling::Raw => Ok(renamed(&tokens, prefix)),
        Spelling::Json => {
            let rules = Rules::read(&tokens)?;
            let raw = rules.regex("start", &mut vec![])?;
            Ok(format!("{prefix}_start: {}\n", json_regex(&raw, "")?))
        }
    }
}

/// A lexical token of a Lark grammar: its kind and its source text.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Name(String),
    /// A string's value and flags.
    Str(String, String),
    /// A regex's pattern and flags.
    Regex(String, String),
    /// A range of characters, `"a".."z"`.
    Range(char, char),
    Number(u32),
    /// One of `: | ( ) [ ] ? * + ~ . ! ..`, or a line break.
    Punct(&'static str),
}

/// `grammar` read into tokens; comments and aliases (`-> name`, which only name a node of the
/// parse tree) left out.
fn tokens(grammar: &str) -> Result<Vec<(Token, String)>, String> {
    const PUNCT: [&str; 13] = [
        "\n", "..", ":", "|", "(", ")", "[", "]", "?", "*", "+", "~", ".",
    ];
    let mut out = vec![];
    let mut s = Scanner {
        text: grammar,
        at: 0,
    };
    while let Some(c) = s.peek() {
        let start = s.at;
        let token = match c {
            '/' if s.starts_with("//") => {
                s.skip_line();
                continue;
            }
            ' ' | '\t' | '\r' => {
                s.at += 1;
                continue;
            }
            '-' if s.starts_with("->") => {
                s.at += 2;
                s.skip_blank();
                s.identifier();
                continue;
            }
            '"' => {
                let (value, flags) = s.string()?;
                Token::Str(value, flags)
            }
            '/' => {
                let (pattern, flags) = s.regex()?;
                Token::Regex(pattern, flags)
            }
            '%' => {
                let line = s.rest().lines().next().unwrap_or_default().trim();
                return Err(format!("the directive `{line}`"));
            }
            c if c.is_ascii_alphabetic() || c == '_' => Token::Name(s.identifier().to_string()),
            c if c.is_ascii_digit() => {
                let digits = s.rest().find(|c: char| !c.is_ascii_digit());
                let n = digits.unwrap_or(s.rest().len());
                let number = s.rest()[..n].parse().map_err(|_| "a number too large")?;
                s.at += n;
                Token::Number(number)
            }
            '!' => {
                s.at += 1;
                Token::Punct("!")
            }
            _ => match PUNCT.iter().find(|p| s.starts_with(p)) {
                Some(p) => {
                    s.at += p.len();
                    Token::Punct(p)
                }
                None => return Err(format!("the character `{c}`")),
            },
        };
        out.push((token, grammar[start..s.at].to_string()));
    }
    // `"a".."z"`: one token.
    let mut joined: Vec<(Token, String)> = Vec::with_capacity(out.len());
    let mut i = 0;
    while i < out.len() {
        if let (Token::Str(a, _), Some((Token::Punct(".."), _)), Some((Token::Str(b, _), end))) =
            (&out[i].0, out.get(i + 1), out.get(i + 2))
        {
            let range = match (single(a), single(b)) {
                (Some(a), Some(b)) if a <= b => Token::Range(a, b),
                _ => return Err(format!("a bad range {}..{end}", out[i].1)),
            };
            joined.push((range, format!("{}..{end}", out[i].1)));
            i += 3;
        } else {
            joined.push(out[i].clone());
            i += 1;
        }
    }
    Ok(joined)
}

/// The grammar's source with every name under `prefix`.
fn renamed(tokens: &[(Token, String)], prefix: &str) -> String {
    let mut out = String::new();
    let mut glued = true;
    for (token, source) in tokens {
        // A priority (`rule.2`) stays glued to its name.
        let dot = *token == Token::Punct(".");
        let tight = dot || matches!(token, Token::Punct(":" | "\n"));
        if !glued && !tight {
            out.push(' ');
        }
        match token {
            Token::Name(name) => out.push_str(&rename(name, prefix)),
            _ => out.push_str(source),
        }
        glued = dot || *token == Token::Punct("\n");
    }
    out
}

/// A grammar's definitions: each rule's or terminal's tokens after its `:`.
struct Rules<'a> {
    defs: Vec<(&'a str, &'a [(Token, String)])>,
}

impl<'a> Rules<'a> {
    fn read(tokens: &'a [(Token, String)]) -> Result<Self, String> {
        // A definition starts a line: `?name:`, `!name:`, `NAME.2:`, `name:`.
        let mut starts = vec![];
        for i in 0..tokens.len() {
            let line_start = i == 0 || tokens[i - 1].0 == Token::Punct("\n");
            if !line_start {
                continue;
            }
            let mut j = i;
            if matches!(tokens[j].0, Token::Punct("?") | Token::Punct("!")) {
                j += 1;
            }
            let Some((Token::Name(name), _)) = tokens.get(j) else {
                continue;
            };
            j += 1;
            if let (Some((Token::Punct("."), _)), Some((Token::Number(_), _))) =
                (tokens.get(j), tokens.get(j + 1))
            {
                j += 2;
            }
            if tokens.get(j).map(|t| &t.0) == Some(&Token::Punct(":")) {
                starts.push((i, name.as_str(), j + 1));
            }
        }
        let mut defs = vec![];
        for (k, (_, name, body)) in starts.iter().enumerate() {
            let end = starts.get(k + 1).map_or(tokens.len(), |s| s.0);
            if defs.iter().any(|(n, _)| n == name) {
                return Err(format!("`{name}` defined twice"));
            }
            defs.push((*name, &tokens[*body..end]));
        }
        Ok(Self { defs })
    }

    /// The regex of `name`'s language; `open` are the definitions being expanded.
    fn regex(&self, name: &str, open: &mut Vec<String>) -> Result<String, String> {
        if open.iter().any(|n| n == name) {
            return Err(format!("`{name}` reaches itself (not a regular language)"));
        }
        let body = self
            .defs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|d| d.1)
            .ok_or_else(|| format!("`{name}` is not defined"))?;
        open.push(name.to_string());
        let tokens: Vec<&Token> = body
            .iter()
            .map(|t| &t.0)
            .filter(|t| **t != Token::Punct("\n"))
            .collect();
        let mut at = 0;
        let regex = self.alternatives(&tokens, &mut at, open)?;
        if at != tokens.len() {
            return Err(format!("`{name}`: unexpected {:?}", tokens[at]));
        }
        open.pop();
        Ok(regex)
    }

    fn alternatives(
        &self,
        t: &[&Token],
        at: &mut usize,
        open: &mut Vec<String>,
    ) -> Result<String, String> {
        let mut alts = vec![self.sequence(t, at, open)?];
        while t.get(*at) == Some(&&Token::Punct("|")) {
            *at += 1;
            alts.push(self.sequence(t, at, open)?);
        }
        Ok(format!("(?:{})", alts.join("|")))
    }

    fn sequence(
        &self,
        t: &[&Token],
        at: &mut usize,
        open: &mut Vec<String>,
    ) -> Result<String, String> {
        let mut out = String::new();
        while let Some(token) = t.get(*at) {
            let atom = match token {
                Token::Punct("|" | ")" | "]") => break,
                Token::Name(name) => {
                    *at += 1;
                    self.regex(name, open)?
                }
                Token::Str(value, flags) => {
                    *at += 1;
                    format!("(?{}:{})", flags_or_u(flags), regex_syntax::escape(value))
                }
                Token::Regex(pattern, flags) => {
                    *at += 1;
                    format!("(?{}:{pattern})", flags_or_u(flags))
                }
                Token::Range(a, b) => {
                    *at += 1;
                    format!(
                        "[{}-{}]",
                        regex_syntax::escape(&a.to_string()),
                        regex_syntax::escape(&b.to_string())
                    )
                }
                Token::Punct(p @ ("(" | "[")) => {
                    *at += 1;
                    let inner = self.alternatives(t, at, open)?;
                    let close = if *p == "(" { ")" } else { "]" };
                    if t.get(*at) != Some(&&Token::Punct(close)) {
                        return Err(format!("`{p}` without `{close}`"));
                    }
                    *at += 1;
                    if *p == "[" {
                        format!("{inner}?")
                    } else {
                        inner
                    }
                }
                other => return Err(format!("unexpected {other:?}")),
            };
            let mut piece = format!("(?:{atom})");
            loop {
                match t.get(*at) {
                    Some(Token::Punct(op @ ("?" | "*" | "+"))) => {
                        piece = format!("(?:{piece}{op})");
                        *at += 1;
                    }
                    Some(Token::Punct("~")) => {
                        let Some(Token::Number(n)) = t.get(*at + 1) else {
                            return Err("`~` without a count".into());
                        };
                        *at += 2;
                        if let (Some(Token::Punct("..")), Some(Token::Number(m))) =
                            (t.get(*at), t.get(*at + 1))
                        {
                            piece = format!("(?:{piece}{{{n},{m}}})");
                            *at += 2;
                        } else {
                            piece = format!("(?:{piece}{{{n}}})");
                        }
                    }
                    _ => break,
                }
            }
            out.push_str(&piece);
        }
        Ok(out)
    }
}

/// Lark's regex flags as an inline group's (`u` is always on; an empty group is not allowed).
fn flags_or_u(flags: &str) -> String {
    let f: String = flags.chars().filter(|c| "imsx".contains(*c)).collect();
    if f.is_empty() {
        "u".into()
    } else {
        f
    }
}

/// `name` under `prefix`: terminals (upper case) stay upper case, rules lower case.
fn rename(name: &str, prefix: &str) -> String {
    let terminal = name
        .trim_start_matches('_')
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_uppercase());
    match terminal {
        true => format!("{}_{name}", prefix.to_ascii_uppercase()),
        false => format!("{}_{name}", prefix.to_ascii_lowercase()),
    }
}

/// Lark's common terminals that grammars import, written out (the grammar is embedded in
/// another, which has no import path).
const COMMON: &[(&str, &str)] = &[
    ("LF", r"/\n/"),
    ("CR", r"/\r/"),
    ("NEWLINE", r"/(\r?\n)+/"),
    ("WS", r"/[ \t\f\r\n]+/"),
    ("WS_INLINE", r"/[ \t]+/"),
    ("DIGIT", r"/[0-9]/"),
    ("HEXDIGIT", r"/[a-fA-F0-9]/"),
    ("INT", r"/[0-9]+/"),
    ("SIGNED_INT", r"/[+\-]?[0-9]+/"),
    ("DECIMAL", r"/[0-9]+\.[0-9]*|\.[0-9]+/"),
    (
        "NUMBER",
        r"/([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+\-]?[0-9]+)?/",
    ),
    (
        "SIGNED_NUMBER",
        r"/[+\-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+\-]?[0-9]+)?/",
    ),
    ("LCASE_LETTER", r"/[a-z]/"),
    ("UCASE_LETTER", r"/[A-Z]/"),
    ("LETTER", r"/[a-zA-Z]/"),
    ("WORD", r"/[a-zA-Z]+/"),
    ("CNAME", r"/[a-zA-Z_][a-zA-Z0-9_]*/"),
    ("ESCAPED_STRING", r#"/"([^"\\\n]|\\.)*"/"#),
];

/// `%import common.NAME` and `%import common (A, B)` lines replaced by the terminals' rules.
fn expand_imports(grammar: &str) -> Result<String, String> {
    let mut out = String::with_capacity(grammar.len());
    for line in grammar.lines() {
        let Some(import) = line.trim().strip_prefix("%import") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let import = import.trim();
        let names: Vec<&str> = if let Some(name) = import.strip_prefix("common.") {
            vec![name.trim()]
        } else if let Some(list) = import.strip_prefix("common") {
            list.trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .split(',')
                .map(str::trim)
                .collect()
        } else {
            return Err(format!("the import `{}`", line.trim()));
        };
        for name in names {
            let def = COMMON
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| format!("the import of `common.{name}`"))?;
            out.push_str(&format!("{name}: {}\n", def.1));
        }
    }
    Ok(out)
}

/// A regex terminal matching the JSON-escaped spelling of what `pattern` matches.
fn json_regex(pattern: &str, flags: &str) -> Result<String, String> {
    let mut parser = regex_syntax::ParserBuilder::new()
        .case_insensitive(flags.contains('i'))
        .multi_line(flags.contains('m'))
        .dot_matches_new_line(flags.contains('s'))
        .ignore_whitespace(flags.contains('x'))
        .build();
    let hir = parser
        .parse(pattern)
        .map_err(|e| format!("the regex /{pattern}/: {e}"))?;
    let escaped = json_hir(&hir).map_err(|why| format!("the regex /{pattern}/: {why}"))?;
    Ok(format!("/{}/", escaped.to_string().replace('/', "\\/")))
}

/// `hir` over JSON-escaped text: each literal escaped, each class split into the characters
/// that stand for themselves and the escapes of those that do not.
fn json_hir(hir: &Hir) -> Result<Hir, &'static str> {
    Ok(match hir.kind() {
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(literal) => {
            let text = std::str::from_utf8(&literal.0).map_err(|_| "bytes that are not UTF-8")?;
            Hir::literal(json_spelling(text).into_bytes())
        }
        HirKind::Class(Class::Unicode(class)) => json_class(class),
        HirKind::Class(Class::Bytes(_)) => return Err("a class of bytes"),
        HirKind::Look(_) => return Err("an anchor or word boundary"),
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            min: r.min,
            max: r.max,
            greedy: r.greedy,
            sub: Box::new(json_hir(&r.sub)?),
        }),
        // Groups only capture: the language is the same without them.
        HirKind::Capture(c) => json_hir(&c.sub)?,
        HirKind::Concat(parts) => {
            Hir::concat(parts.iter().map(json_hir).collect::<Result<_, _>>()?)
        }
        HirKind::Alternation(parts) => {
            Hir::alternation(parts.iter().map(json_hir).collect::<Result<_, _>>()?)
        }
    })
}

fn json_class(class: &ClassUnicode) -> Hir {
    let mut escaped = ClassUnicode::new([
        ClassUnicodeRange::new('\0', '\x1f'),
        ClassUnicodeRange::new('"', '"'),
        ClassUnicodeRange::new('\\', '\\'),
    ]);
    let mut plain = class.clone();
    plain.difference(&escaped);
    escaped.intersect(class);
    let mut alternatives = vec![];
    if !plain.ranges().is_empty() {
        alternatives.push(Hir::class(Class::Unicode(plain)));
    }
    for range in escaped.iter() {
        for c in range.start()..=range.end() {
            alternatives.push(Hir::literal(json_spelling(&c.to_string()).into_bytes()));
        }
    }
    Hir::alternation(alternatives)
}

/// `text` as it stands inside a JSON string written by `json.dumps` (or `serde_json`).
fn json_spelling(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    let inner = quoted.strip_prefix('"').and_then(|q| q.strip_suffix('"'));
    inner.unwrap_or_default().to_string()
}

/// The one character of `s`, if it has exactly one.
fn single(s: &str) -> Option<char> {
    let mut chars = s.chars();
    chars.next().filter(|_| chars.next().is_none())
}

/// A cursor over a grammar's text.
struct Scanner<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn starts_with(&self, s: &str) -> bool {
        self.rest().starts_with(s)
    }

    fn skip_line(&mut self) {
        self.at += self.rest().find('\n').unwrap_or(self.rest().len());
    }

    /// Spaces and tabs (not line breaks, which end a rule).
    fn skip_blank(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start_matches([' ', '\t']).len();
    }

    fn identifier(&mut self) -> &'a str {
        let rest = self.rest();
        let n = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        self.at += n;
        &rest[..n]
    }

    /// A string literal at the cursor: its value and its flags.
    fn string(&mut self) -> Result<(String, String), String> {
        let body = self.delimited('"')?;
        let value = unescape(body).map_err(|why| format!("the string \"{body}\": {why}"))?;
        Ok((value, self.flags()))
    }

    /// A regex literal at the cursor: its pattern (`\/` read as `/`) and its flags.
    fn regex(&mut self) -> Result<(String, String), String> {
        let body = self.delimited('/')?.replace("\\/", "/");
        Ok((body, self.flags()))
    }

    /// The text between `quote` at the cursor and the next unescaped `quote` on the line.
    fn delimited(&mut self, quote: char) -> Result<&'a str, String> {
        let rest = self.rest();
        let mut escaped = false;
        for (i, c) in rest.char_indices().skip(1) {
            match c {
                '\n' => break,
                '\\' if !escaped => escaped = true,
                c if c == quote && !escaped => {
                    self.at += i + 1;
                    return Ok(&rest[1..i]);
                }
                _ => escaped = false,
            }
        }
        let line = rest.lines().next().unwrap_or_default();
        Err(format!("an unterminated literal: {line}"))
    }

    fn flags(&mut self) -> String {
        let rest = self.rest();
        let n = rest
            .find(|c: char| !"imslux".contains(c))
            .unwrap_or(rest.len());
        // Flags are letters right after the literal; a rule name after a space is not one.
        self.at += n;
        rest[..n].to_string()
    }
}

/// A Lark (Python) string literal's body read into its value.
fn unescape(body: &str) -> Result<String, String> {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next().ok_or("a trailing backslash")?;
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'f' => out.push('\x0c'),
            'b' => out.push('\x08'),
            '0' => out.push('\0'),
            '\\' | '"' | '\'' => out.push(e),
            'x' | 'u' | 'U' => {
                let len = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = chars.by_ref().take(len).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == len)
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("a bad escape \\{e}{hex}"))?;
                out.push(code);
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use llguidance::api::TopLevelGrammar;
    use llguidance::toktrie::ApproximateTokEnv;
    use llguidance::{Matcher, ParserFactory};

    /// Codex's `apply_patch` grammar (codex-rs, `tool_apply_patch.lark`).
    const APPLY_PATCH: &str = include_str!("../../tests/fixtures/apply_patch.lark");

    /// Whether `grammar` (whose entry is `start`) takes `text` whole, byte by byte.
    fn takes(grammar: &str, text: &str) -> bool {
        let env = ApproximateTokEnv::single_byte_env();
        let Ok(mut factory) = ParserFactory::new_simple(&env) else {
            return false;
        };
        factory.quiet();
        let Ok(parser) = factory.create_parser(TopLevelGrammar::from_lark(grammar.into())) else {
            panic!("does not compile:\n{grammar}");
        };
        let mut m = Matcher::new(Ok(parser));
        let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
        m.try_consume_tokens(&tokens).ok() == Some(tokens.len())
            && m.is_accepting().unwrap_or(false)
    }

    fn in_json_string(grammar: &str) -> String {
        let rules = embed(grammar, "g", Spelling::Json).unwrap_or_else(|e| panic!("{e}"));
        format!("start: \"\\\"\" g_start \"\\\"\"\n{rules}")
    }

    const PATCH: &str = "*** Begin Patch\n*** Update File: src/\"main\".rs\n@@ fn main\n-    println!(\"hi\");\n+\tprintln!(\"a\\\\b\");\n*** Add File: hello.py\n+print('hello world')\n*** End Patch\n";

    #[test]
    fn a_patch_is_taken_json_escaped_and_raw() {
        let json = in_json_string(APPLY_PATCH);
        let quoted = serde_json::to_string(PATCH).unwrap_or_default();
        assert!(takes(&json, &quoted), "{json}\n{quoted}");
        // The raw text is no JSON string, and a raw line break is not allowed in one.
        assert!(!takes(&json, &format!("\"{PATCH}\"")));
        // A patch the grammar does not take, escaped: still refused.
        let bad = serde_json::to_string("*** Begin Patch\n*** Frobnicate: x\n*** End Patch\n")
            .unwrap_or_default();
        assert!(!takes(&json, &bad));
        let raw = embed(APPLY_PATCH, "g", Spelling::Raw).unwrap_or_else(|e| panic!("{e}"));
        assert!(takes(&format!("start: g_start\n{raw}"), PATCH));
    }

    #[test]
    fn classes_literals_and_ranges_take_their_escapes() {
        let grammar = r#"start: "say \"" WORD "\"" TAB? ("a".."c")+ /[^x]/
TAB: /\t/
WORD: /[a-z\\]+/i
"#;
        let json = in_json_string(grammar);
        for (text, ok) in [
            ("say \"hI\\\"ab\"", true),
            ("say \"q\"a\n", true),
            ("say \"q\"\tcc\u{1}", true),
            ("say \"q\"ax", false),
            ("say \"q\"d!", false),
        ] {
            let quoted = serde_json::to_string(text).unwrap_or_default();
            assert_eq!(takes(&json, &quoted), ok, "{text:?} as {quoted}\n{json}");
        }
    }

    #[test]
    fn names_are_prefixed_and_what_cannot_be_embedded_is_named() {
        let rules = embed("start: a B\na: \"x\"\nB: /y/\n", "t3", Spelling::Raw)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rules, "t3_start: t3_a T3_B\nt3_a: \"x\"\nT3_B: /y/\n");
        for (grammar, named) in [
            ("start: A\n%ignore \" \"\n", "%ignore"),
            ("start: /^a/\n", "anchor"),
            ("start: \"a\n", "unterminated"),
            ("start: X\n%import common.NOPE\n", "common.NOPE"),
            ("start: a\na: \"(\" a? \")\"\n", "reaches itself"),
        ] {
            let e = embed(grammar, "g", Spelling::Json)
                .err()
                .unwrap_or_default();
            assert!(e.contains(named), "{grammar:?}: {e}");
        }
    }
}
