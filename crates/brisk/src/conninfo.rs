//! libpq's `keyword = value` connection strings (`host=db password='a b'`): where each
//! keyword and value are. A value may be quoted with `'`, and `\` escapes the next character,
//! quoted or not.

use std::ops::Range;

/// One `keyword = value` pair, as byte ranges of the string it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    /// The pair from the keyword's first byte to the value's last.
    pub whole: Range<usize>,
    pub keyword: Range<usize>,
    /// The value as written (quotes and escapes included); empty when the keyword has no
    /// `=` after it.
    pub value: Range<usize>,
    /// The value opens a quote that never closes (it runs to the end of the string).
    pub unterminated: bool,
}

/// The pairs of `s`, in order. Whitespace is what `char::is_whitespace` says, as for
/// tokio-postgres. Lenient: a keyword without `=` gets an empty value (the next word is a
/// pair of its own), and an unterminated quote runs to the end.
pub(crate) fn words(s: &str) -> Vec<Word> {
    let at = |i: usize| s[i..].chars().next();
    let skip_space = |mut i: usize| {
        while let Some(c) = at(i).filter(|c| c.is_whitespace()) {
            i += c.len_utf8();
        }
        i
    };
    let mut found = Vec::new();
    let mut i = skip_space(0);
    while i < s.len() {
        let keyword_start = i;
        while let Some(c) = at(i).filter(|&c| c != '=' && !c.is_whitespace()) {
            i += c.len_utf8();
        }
        let keyword = keyword_start..i;
        let after_keyword = i;
        i = skip_space(i);
        if at(i) != Some('=') {
            found.push(Word {
                whole: keyword.clone(),
                keyword,
                value: after_keyword..after_keyword,
                unterminated: false,
            });
            continue;
        }
        i = skip_space(i + 1);
        let value_start = i;
        let quoted = at(i) == Some('\'');
        let mut unterminated = quoted;
        if quoted {
            i += 1;
        }
        while let Some(c) = at(i) {
            match c {
                '\\' => {
                    i += 1;
                    if let Some(next) = at(i) {
                        i += next.len_utf8();
                    }
                    continue;
                }
                '\'' if quoted => {
                    i += 1;
                    unterminated = false;
                    break;
                }
                c if c.is_whitespace() && !quoted => break,
                _ => {}
            }
            i += c.len_utf8();
        }
        found.push(Word {
            whole: keyword_start..i,
            keyword,
            value: value_start..i,
            unterminated,
        });
        i = skip_space(i);
    }
    found
}

/// A value as written, without its quotes and escapes.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))] // only the PostgreSQL client reads values
pub(crate) fn unquoted(raw: &str) -> String {
    let inner = raw
        .strip_prefix('\'')
        .map(|r| r.strip_suffix('\'').unwrap_or(r))
        .unwrap_or(raw);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{unquoted, words};

    /// Each pair of `s` as (keyword, value as written).
    fn pairs(s: &str) -> Vec<(&str, &str)> {
        words(s)
            .iter()
            .map(|w| (&s[w.keyword.clone()], &s[w.value.clone()]))
            .collect()
    }

    #[test]
    fn keywords_and_values_with_quotes_escapes_and_spaces_around_the_sign() {
        let s = r"host=db password = 'a b\' c' sslrootcert=/x\ y.pem port=5432";
        assert_eq!(
            pairs(s),
            [
                ("host", "db"),
                ("password", r"'a b\' c'"),
                ("sslrootcert", r"/x\ y.pem"),
                ("port", "5432")
            ]
        );
        assert_eq!(unquoted(r"'a b\' c'"), "a b' c");
        assert_eq!(unquoted(r"/x\ y.pem"), "/x y.pem");
        assert_eq!(&s[words(s)[1].whole.clone()], r"password = 'a b\' c'");
    }

    #[test]
    fn an_unterminated_quote_runs_to_the_end() {
        let s = "host=db password='open";
        let w = &words(s)[1];
        assert_eq!(&s[w.value.clone()], "'open");
        assert!(w.unterminated);
        assert!(!words(s)[0].unterminated);
        assert_eq!(unquoted("'open"), "open");
    }

    #[test]
    fn a_keyword_without_a_sign_does_not_take_the_next_pair() {
        let s = "host=h bogus password=s3cret";
        assert_eq!(
            pairs(s),
            [("host", "h"), ("bogus", ""), ("password", "s3cret")]
        );
    }

    #[test]
    fn unicode_whitespace_separates_pairs_as_for_tokio_postgres() {
        let s = "host=h\u{0B}password=s3cret\u{A0}sslmode=verify-full";
        let keywords: Vec<&str> = words(s).iter().map(|w| &s[w.keyword.clone()]).collect();
        assert_eq!(keywords, ["host", "password", "sslmode"]);
    }
}
