//! A small Rust source scanner for the `arch` gate: it blanks comments and the
//! contents of string and char literals, then finds forbidden words with
//! identifier boundaries, reporting 1-based line numbers.
//!
//! Only for what clippy's configuration cannot say: `disallowed-types` does not
//! fire on a unit struct used as a value (`&mut SysRng`). Every other rule of
//! drain-core's purity lives in its clippy.toml, which resolves paths (an alias
//! does not get through).

/// One forbidden word and why.
pub(crate) type Word = (&'static str, &'static str);

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hit {
    /// 1-based line.
    pub(crate) line: usize,
    /// The word that matched.
    pub(crate) needle: &'static str,
    /// Why it is forbidden.
    pub(crate) why: &'static str,
}

/// Every forbidden word in `src` outside comments and literals, in line order,
/// once per line.
pub(crate) fn find(src: &str, words: &[Word]) -> Vec<Hit> {
    let code = code_only(src);
    let mut hits: Vec<Hit> = Vec::new();
    for &(needle, why) in words {
        for at in matches(&code, needle) {
            let line = line_of(&code, at);
            if !hits.iter().any(|h| h.line == line && h.needle == needle) {
                hits.push(Hit { line, needle, why });
            }
        }
    }
    hits.sort_by_key(|h| h.line);
    hits
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// Byte offsets in `code` where `needle` stands as a whole identifier.
fn matches(code: &str, needle: &str) -> Vec<usize> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(found) = code[pos..].find(needle) {
        let at = pos + found;
        let end = at + needle.len();
        let starts_clean = at == 0 || !is_ident(bytes[at - 1]);
        let ends_clean = end >= bytes.len() || !is_ident(bytes[end]);
        if starts_clean && ends_clean {
            out.push(at);
        }
        pos = at + 1;
    }
    out
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

    const WORDS: &[Word] = &[("SysRng", "OS randomness"), ("getrandom", "OS randomness")];

    #[track_caller]
    fn check(src: &str, expected: &[(usize, &str)]) {
        let got: Vec<(usize, &str)> = find(src, WORDS).iter().map(|h| (h.line, h.needle)).collect();
        assert_eq!(got, expected, "find({src:?})");
    }

    #[test]
    fn finds_words_at_identifier_boundaries() {
        check("let mut g = rand::rngs::SysRng;", &[(1, "SysRng")]);
        check("try_from_rng(&mut SysRng)", &[(1, "SysRng")]);
        check("use rand::rngs::{SysRng, StdRng};", &[(1, "SysRng")]);
        check("let g = MySysRng;", &[]);
        check("let g = SysRngs;", &[]);
        check("getrandom::fill(&mut b)", &[(1, "getrandom")]);
        check("// SysRng\n/// getrandom\nok", &[]);
        check("let s = \"SysRng\";", &[]);
        check("a\nb SysRng; SysRng", &[(2, "SysRng")]);
    }
}
