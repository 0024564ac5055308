//! Words a text must not use, comments and documentation included (unlike `scan`,
//! which looks at code only): the `arch` gate keeps Redis vocabulary out of
//! drain-core, and references to the shared spec's sections, to issue numbers and to
//! the seed documents out of the repository's code.

/// How a word is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Case {
    /// Exactly as written (Redis' upper-case error codes and commands).
    Sensitive,
    /// In any case (`Redis`, `redis`, `REDIS`).
    Insensitive,
}

/// One forbidden word or phrase, matched at word boundaries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Word {
    pub(crate) needle: &'static str,
    pub(crate) case: Case,
    pub(crate) why: &'static str,
}

impl Word {
    pub(crate) const fn exact(needle: &'static str, why: &'static str) -> Self {
        Word { needle, case: Case::Sensitive, why }
    }

    pub(crate) const fn any_case(needle: &'static str, why: &'static str) -> Self {
        Word { needle, case: Case::Insensitive, why }
    }
}

/// One finding: 1-based line, the text found, why it is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hit {
    pub(crate) line: usize,
    pub(crate) found: String,
    pub(crate) why: &'static str,
}

const REDIS: &str = "is Redis vocabulary: drain-core speaks of leases, fences and claims (adapter-redis maps them)";

/// Redis words drain-core's source must not use. The crate names `adapter-redis` and
/// `adapter_redis` may be named (as where an implementation lives).
pub(crate) const REDIS_WORDS: &[Word] = &[
    Word::any_case("redis", REDIS),
    Word::any_case("hash slot", REDIS),
    Word::any_case("hash slots", REDIS),
    Word::any_case("hash tag", REDIS),
    Word::any_case("hash tags", REDIS),
    Word::any_case("lua", REDIS),
    Word::any_case("pub/sub", REDIS),
    Word::exact("WRONGTYPE", REDIS),
    Word::exact("MOVED", REDIS),
    Word::exact("ASK", REDIS),
    Word::exact("LOADING", REDIS),
    Word::exact("NOSCRIPT", REDIS),
    Word::exact("NOPERM", REDIS),
    Word::exact("CROSSSLOT", REDIS),
    Word::exact("CLUSTERDOWN", REDIS),
    Word::exact("TRYAGAIN", REDIS),
    Word::exact("MASTERDOWN", REDIS),
    Word::exact("EVALSHA", REDIS),
    Word::exact("PEXPIRE", REDIS),
    Word::exact("PTTL", REDIS),
    Word::exact("INCR", REDIS),
    Word::exact("SETNX", REDIS),
    Word::exact("SET NX", REDIS),
    Word::exact("LPOP", REDIS),
    Word::exact("RPUSH", REDIS),
    Word::exact("LREM", REDIS),
    Word::exact("HINCRBY", REDIS),
    Word::exact("SCAN", REDIS),
];

/// Names that contain a forbidden word but may stand: blanked before matching.
const ALLOWED: &[&str] = &["adapter-redis", "adapter_redis"];

/// Every forbidden word of `words` in `text`, in line order, once per line and word.
pub(crate) fn find(text: &str, words: &[Word]) -> Vec<Hit> {
    let mut blanked = text.to_owned();
    for allowed in ALLOWED {
        blanked = blank_all(&blanked, allowed);
    }
    let lower = blanked.to_ascii_lowercase();
    let mut hits: Vec<Hit> = Vec::new();
    for w in words {
        let (hay, needle) = match w.case {
            Case::Sensitive => (blanked.as_str(), w.needle.to_owned()),
            Case::Insensitive => (lower.as_str(), w.needle.to_ascii_lowercase()),
        };
        for at in word_matches(hay, &needle) {
            let line = line_of(text, at);
            let found = text[at..at + needle.len()].to_owned();
            if !hits.iter().any(|h| h.line == line && h.found.eq_ignore_ascii_case(&found)) {
                hits.push(Hit { line, found, why: w.why });
            }
        }
    }
    hits.sort_by(|a, b| a.line.cmp(&b.line).then(a.found.cmp(&b.found)));
    hits
}

const REFERENCE: &str =
    "refers to the shared spec, an issue or the seed documents: say what is meant, or link a file of the repository";

/// References to the spec's sections (`SPEC §4`, `§6`), to the spec file, to issue
/// numbers (`issue 7`, `issue #12`, `issues 3 and 4`) and to the seed documents.
pub(crate) fn references(text: &str) -> Vec<Hit> {
    let mut hits = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lower = line.to_ascii_lowercase();
        let mut found: Option<String> = None;
        if let Some(at) = line.find('§') {
            found = Some(line[at..].chars().take(4).collect());
        } else if let Some(at) = find_word(&lower, "spec.md").or_else(|| find_word(line, "SPEC")) {
            found = Some(line[at..].chars().take(8).collect());
        } else if let Some(at) = issue_number(&lower) {
            found = Some(line[at..].chars().take(12).collect());
        } else if let Some(at) = lower
            .find("seeds/")
            .or_else(|| find_word(&lower, "seed documents"))
            .or_else(|| find_word(&lower, "the seed's"))
        {
            found = Some(line[at..].chars().take(14).collect());
        }
        if let Some(found) = found {
            hits.push(Hit { line: i + 1, found, why: REFERENCE });
        }
    }
    hits
}

/// Where `issue N`, `issue #N` or `issues N` starts in a lower-case line.
fn issue_number(lower: &str) -> Option<usize> {
    for at in word_matches(lower, "issue").into_iter().chain(word_matches(lower, "issues")) {
        let rest = lower[at..].trim_start_matches("issues").trim_start_matches("issue");
        let rest = rest.trim_start().trim_start_matches('#');
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Some(at);
        }
    }
    None
}

fn find_word(hay: &str, needle: &str) -> Option<usize> {
    word_matches(hay, needle).into_iter().next()
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// Offsets of `needle` in `hay` that neither start nor end inside a longer word.
fn word_matches(hay: &str, needle: &str) -> Vec<usize> {
    let bytes = hay.as_bytes();
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(found) = hay[pos..].find(needle) {
        let at = pos + found;
        let end = at + needle.len();
        let starts_clean = at == 0 || !is_word_byte(bytes[at - 1]);
        let ends_clean = end >= bytes.len() || !is_word_byte(bytes[end]);
        if starts_clean && ends_clean {
            out.push(at);
        }
        pos = at + 1;
    }
    out
}

/// `text` with every occurrence of `what` replaced by as many spaces (offsets stay).
fn blank_all(text: &str, what: &str) -> String {
    text.replace(what, &" ".repeat(what.len()))
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].bytes().filter(|&b| b == b'\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_words() {
        let check = |text: &str, expected: &[&str]| {
            let got: Vec<String> = find(text, REDIS_WORDS).into_iter().map(|h| h.found).collect();
            assert_eq!(got, expected, "{text}");
        };
        check("/// stored in Redis", &["Redis"]);
        check("// a WRONGTYPE answer", &["WRONGTYPE"]);
        check("let hash_tag = 1; // the hash tag of a key", &["hash tag"]);
        check("adapter-redis implements it; see adapter_redis::RedisStore", &[]);
        check("Messages moved to the dead-letter queue; we ask the store", &[]);
        check("a key that MOVED; PTTL and SET NX PX", &["MOVED", "PTTL", "SET NX"]);
        check("redistribute the items; solar; a lua script", &["lua"]);
        check("one per line\nRedis and redis", &["Redis"]);
    }

    #[test]
    fn references_to_the_spec_issues_and_seeds() {
        let check = |text: &str, expected: usize| assert_eq!(references(text).len(), expected, "{text}");
        check("//! The tick of SPEC §4.", 1);
        check("/// (§6)", 1);
        check("// see /work/shared/SPEC.md", 1);
        check("// Release wake-up (issue 7): waiters", 1);
        check("# issue #12, item 3", 1);
        check("// issues 3 and 4", 1);
        check("// the seed documents say", 1);
        check("// read seeds/ once", 1);
        check("// the seed's 5-15 s window", 1);
        check("let rng = TestRng::new(seed); // seeded (seed)", 0);
        check("// an issue with the broker; specify; a seeded generator", 0);
        check("/// the spec of this port, its rules", 0);
    }
}
