//! A small Rust source scanner for the `arch` and `env` gates: it blanks comments and
//! the contents of string and char literals, then finds forbidden paths with
//! identifier boundaries, reporting 1-based line numbers.
//!
//! It is a lint, not a compiler: a determined alias (`use std::time::Instant as I;
//! I::now()`) gets through. The clippy lints and code review cover the rest.

/// One forbidden path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pattern {
    /// The text to find, e.g. `Instant::now`.
    pub(crate) needle: &'static str,
    /// Whether the needle may continue into a longer identifier (`env::var` also
    /// matches `env::var_os`). The start is always an identifier boundary.
    pub(crate) prefix: bool,
    /// Why it is forbidden, for the message.
    pub(crate) why: &'static str,
}

impl Pattern {
    /// A needle that must end at an identifier boundary.
    pub(crate) const fn word(needle: &'static str, why: &'static str) -> Self {
        Pattern { needle, prefix: false, why }
    }

    /// A needle that may continue into a longer identifier.
    pub(crate) const fn prefix(needle: &'static str, why: &'static str) -> Self {
        Pattern { needle, prefix: true, why }
    }
}

/// A grouped import such as `use std::{env, fs};`: inside the braces that follow
/// `open`, the `inner` patterns are searched as well.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Group {
    /// The path that opens the group, ending in `{`, e.g. `std::{`.
    pub(crate) open: &'static str,
    /// What is forbidden inside it.
    pub(crate) inner: &'static [Pattern],
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hit {
    /// 1-based line.
    pub(crate) line: usize,
    /// The needle that matched.
    pub(crate) needle: &'static str,
    /// Why it is forbidden.
    pub(crate) why: &'static str,
}

/// Find every forbidden path in `src` outside comments and literals, in line order.
/// Overlapping matches count once (`env::var_os` is not also `var_os`), and a needle
/// counts once per line.
pub(crate) fn find(src: &str, patterns: &[Pattern], groups: &[Group]) -> Vec<Hit> {
    let code = code_only(src);
    // (start, end, pattern)
    let mut found: Vec<(usize, usize, &Pattern)> = Vec::new();
    for p in patterns {
        for at in matches(&code, p.needle, p.prefix, 0, code.len()) {
            found.push((at, at + p.needle.len(), p));
        }
    }
    for g in groups {
        for open in matches(&code, g.open, true, 0, code.len()) {
            let start = open + g.open.len();
            let end = group_end(&code, start);
            for p in g.inner {
                for at in matches(&code, p.needle, p.prefix, start, end) {
                    found.push((at, at + p.needle.len(), p));
                }
            }
        }
    }
    // Earliest first, longest first among equals; drop what overlaps a kept match.
    found.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut hits: Vec<Hit> = Vec::new();
    let mut kept_until = 0;
    for (start, end, p) in found {
        if start < kept_until {
            continue;
        }
        kept_until = end;
        let line = line_of(&code, start);
        if !hits.iter().any(|h| h.line == line && h.needle == p.needle) {
            hits.push(Hit { line, needle: p.needle, why: p.why });
        }
    }
    hits
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// Byte offsets in `code[from..to]` where `needle` starts at an identifier boundary
/// (and, unless `prefix`, ends at one).
fn matches(code: &str, needle: &str, prefix: bool, from: usize, to: usize) -> Vec<usize> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut pos = from;
    while let Some(found) = code[pos..to].find(needle) {
        let at = pos + found;
        let end = at + needle.len();
        let starts_clean = at == 0 || !is_ident(bytes[at - 1]);
        let last_is_ident = needle.as_bytes().last().is_some_and(|&b| is_ident(b));
        let ends_clean = prefix || !last_is_ident || end >= bytes.len() || !is_ident(bytes[end]);
        if starts_clean && ends_clean {
            out.push(at);
        }
        pos = at + 1;
    }
    out
}

/// The offset of the `}` that closes a group opened just before `start`.
fn group_end(code: &str, start: usize) -> usize {
    let mut depth = 1usize;
    for (i, b) in code.bytes().enumerate().skip(start) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].bytes().filter(|&b| b == b'\n').count() + 1
}

/// `src` with comments and the contents of string and char literals replaced by
/// spaces. Newlines are kept, so line numbers stay right; delimiters are kept, so
/// `env::var("X")` stays recognisable.
pub(crate) fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |c: char, out: &mut String| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < chars.len() {
                let (a, b) = (chars[i], chars.get(i + 1).copied());
                if a == '/' && b == Some('*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if a == '*' && b == Some('/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(a, &mut out);
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            // `r`, the hashes and the opening quote stay as code.
            for &ch in &chars[i..i + hashes + 2] {
                out.push(ch);
            }
            i += hashes + 2;
            while i < chars.len() {
                let closes = chars[i] == '"'
                    && chars.len() >= i + 1 + hashes
                    && chars[i + 1..i + 1 + hashes].iter().all(|&h| h == '#');
                if closes {
                    for &ch in &chars[i..i + 1 + hashes] {
                        out.push(ch);
                    }
                    i += 1 + hashes;
                    break;
                }
                blank(chars[i], &mut out);
                i += 1;
            }
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() {
                match chars[i] {
                    '\\' => {
                        blank('\\', &mut out);
                        if let Some(&escaped) = chars.get(i + 1) {
                            blank(escaped, &mut out);
                        }
                        i += 2;
                    }
                    '"' => {
                        out.push('"');
                        i += 1;
                        break;
                    }
                    other => {
                        blank(other, &mut out);
                        i += 1;
                    }
                }
            }
        } else if c == '\'' {
            let char_literal_len = match (next, chars.get(i + 2).copied()) {
                (Some('\\'), _) => chars[i + 2..].iter().skip(1).position(|&ch| ch == '\'').map(|p| p + 4),
                (Some(_), Some('\'')) => Some(3),
                _ => None, // a lifetime or a label
            };
            match char_literal_len {
                Some(len) if i + len <= chars.len() => {
                    out.push('\'');
                    for &ch in &chars[i + 1..i + len - 1] {
                        blank(ch, &mut out);
                    }
                    out.push('\'');
                    i += len;
                }
                _ => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// At `i`, does a raw string (`r"`, `r#"`, `br#"`, `cr"`) start? Returns the number of
/// `#`s. The `r` must not continue an identifier (other than a `b`/`c` prefix).
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    if chars[i] != 'r' {
        return None;
    }
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    if i > 0 && ident(chars[i - 1]) {
        let prefixed = matches!(chars[i - 1], 'b' | 'c') && (i < 2 || !ident(chars[i - 2]));
        if !prefixed {
            return None;
        }
    }
    let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
    (chars.get(i + 1 + hashes) == Some(&'"')).then_some(hashes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_code(src: &str, expected: &str) {
        assert_eq!(code_only(src), expected, "code_only({src:?})");
    }

    #[test]
    fn comments_and_literals_are_blanked() {
        check_code("a // b\nc", "a     \nc");
        check_code("a /* b /* c */ d */ e", "a                   e");
        check_code("x(\"std::env\")", "x(\"        \")");
        check_code(r#"x("\"std::fs")"#, r#"x("         ")"#);
        check_code(r###"r#"a"b"# c"###, r###"r#"   "# c"###);
        check_code(r#"br"x" y"#, r#"br" " y"#);
        check_code("'\"' std::fs", "' ' std::fs");
        check_code(r"'\'' std::fs", r"'  ' std::fs");
        check_code("fn f<'a>(x: &'a str) {}", "fn f<'a>(x: &'a str) {}");
        check_code("'outer: loop {}", "'outer: loop {}");
        check_code("bar\"s\" err", "bar\" \" err");
        check_code("s = \"a\nb\"; std::fs", "s = \" \n \"; std::fs");
    }

    const PATTERNS: &[Pattern] =
        &[Pattern::word("Instant::now", "clock"), Pattern::word("std::fs", "I/O"), Pattern::prefix("env::var", "env")];
    const GROUPS: &[Group] = &[Group { open: "std::{", inner: &[Pattern::word("fs", "I/O")] }];

    #[track_caller]
    fn check(src: &str, expected: &[(usize, &str)]) {
        let got: Vec<(usize, &str)> = find(src, PATTERNS, GROUPS).iter().map(|h| (h.line, h.needle)).collect();
        assert_eq!(got, expected, "find({src:?})");
    }

    #[test]
    fn finds_paths_at_identifier_boundaries() {
        check("let t = Instant::now();", &[(1, "Instant::now")]);
        check("let t = std::time::Instant::now();", &[(1, "Instant::now")]);
        check("let t = MyInstant::now();", &[]);
        check("let t = Instant::now_or_never();", &[]);
        check("use std::fs;\nuse std::fsx;", &[(1, "std::fs")]);
        check("::std::fs::read(p)", &[(1, "std::fs")]);
        check("std::env::var_os(\"X\")", &[(1, "env::var")]);
        check("myenv::var()", &[]);
        check("// Instant::now()\n/// std::fs\nok", &[]);
        check("let s = \"Instant::now\";", &[]);
        check("a\nb Instant::now(); Instant::now()", &[(2, "Instant::now")]);
    }

    #[test]
    fn finds_names_inside_grouped_imports() {
        check("use std::{\n    collections::HashMap,\n    fs,\n};", &[(3, "fs")]);
        check("use std::{io::{self, Read}, fs::File};", &[(1, "fs")]);
        check("use std::{io, time};", &[]);
    }
}
