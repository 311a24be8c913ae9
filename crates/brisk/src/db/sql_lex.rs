//! SQL as the statement check reads it: tokens of each dialect
//! (words, quoted identifiers, strings, dollar quotes, comments, punctuation), and statements
//! split at `;` with a trigger's or routine's body kept whole. Pure functions of the text.

/// The SQL dialect of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Postgres,
    Mysql,
    Sqlite,
}

/// A token that matters here: a word (keyword or bare identifier), a quoted identifier (its
/// text, never a keyword), `;` (where it is), or one of a few symbols. Literals and numbers
/// are `Other`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Token<'a> {
    Word(&'a str),
    Quoted(&'a str),
    Semicolon(usize),
    Symbol(u8),
    Other,
}

impl Token<'_> {
    /// Whether this is the keyword (an unquoted word).
    pub(super) fn is(&self, keyword: &str) -> bool {
        matches!(self, Token::Word(w) if w.eq_ignore_ascii_case(keyword))
    }

    /// Whether this names `name`, quoted or not (a function, a schema).
    pub(super) fn names(&self, name: &str) -> bool {
        matches!(self, Token::Word(w) | Token::Quoted(w) if w.eq_ignore_ascii_case(name))
    }
}

pub(super) fn is_word_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

pub(super) fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// The tokens of `sql`.
pub(super) fn lex(sql: &str, dialect: Dialect) -> Vec<Token<'_>> {
    let bytes = sql.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    // Inside MySQL's `/*! … */`, whose text is SQL: its closing `*/` is skipped.
    let mut executable_comment = false;
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        match b {
            b if b.is_ascii_whitespace() => i += 1,
            b'-' if next == Some(b'-')
                && (dialect != Dialect::Mysql
                    || bytes.get(i + 2).is_none_or(|c| c.is_ascii_whitespace())) =>
            {
                i = skip_line(bytes, i);
            }
            b'#' if dialect == Dialect::Mysql => i = skip_line(bytes, i),
            b'*' if next == Some(b'/') && executable_comment => {
                executable_comment = false;
                i += 2;
            }
            b'/' if next == Some(b'*') => {
                if dialect == Dialect::Mysql && matches!(bytes.get(i + 2), Some(b'!' | b'M')) {
                    // `/*!50100 SQL */` and MariaDB's `/*M!100100 SQL */` run their text.
                    i += 2;
                    while i < bytes.len() && matches!(bytes[i], b'!' | b'M' | b'0'..=b'9') {
                        i += 1;
                    }
                    executable_comment = true;
                } else {
                    i = skip_block_comment(bytes, i, dialect == Dialect::Postgres);
                }
            }
            b'\'' => {
                let backslashes = dialect == Dialect::Mysql;
                i = skip_quoted(bytes, i, b'\'', backslashes);
                tokens.push(Token::Other);
            }
            // MySQL's "…" is a string (without ANSI_QUOTES); elsewhere an identifier.
            b'"' if dialect == Dialect::Mysql => {
                i = skip_quoted(bytes, i, b'"', true);
                tokens.push(Token::Other);
            }
            b'"' | b'`' if b == b'"' || dialect != Dialect::Postgres => {
                let end = skip_quoted(bytes, i, b, false);
                tokens.push(Token::Quoted(inner(sql, i + 1, end)));
                i = end;
            }
            b'[' if dialect == Dialect::Sqlite => {
                let end = bytes[i..]
                    .iter()
                    .position(|&c| c == b']')
                    .map_or(bytes.len(), |p| i + p + 1);
                tokens.push(Token::Quoted(inner(sql, i + 1, end)));
                i = end;
            }
            b'$' if dialect == Dialect::Postgres => {
                i = skip_dollar(bytes, i);
                tokens.push(Token::Other);
            }
            b';' => {
                tokens.push(Token::Semicolon(i));
                i += 1;
            }
            b'0'..=b'9' => {
                while i < bytes.len() && (is_word_byte(bytes[i]) || bytes[i] == b'.') {
                    i += 1;
                }
                tokens.push(Token::Other);
            }
            b if is_word_start(b) => {
                let start = i;
                while i < bytes.len() && is_word_byte(bytes[i]) {
                    i += 1;
                }
                let word = &sql[start..i];
                if bytes.get(i) == Some(&b'\'') && is_string_prefix(word) {
                    // E'…' (backslash escapes), X'…', B'…', N'…', U&'…' are literals.
                    let backslashes = dialect == Dialect::Mysql || word.eq_ignore_ascii_case("e");
                    i = skip_quoted(bytes, i, b'\'', backslashes);
                    tokens.push(Token::Other);
                    continue;
                }
                tokens.push(Token::Word(word));
            }
            b'(' | b')' | b'=' | b'@' | b',' | b'.' => {
                tokens.push(Token::Symbol(b));
                i += 1;
            }
            _ => i += 1,
        }
    }
    tokens
}

/// The text between a quote at `start - 1` and the one closing it before `end` (what an
/// unterminated quote has).
pub(super) fn inner(sql: &str, start: usize, end: usize) -> &str {
    let end = if end > start
        && sql
            .as_bytes()
            .get(end - 1)
            .is_some_and(|b| matches!(b, b'"' | b'`' | b']'))
    {
        end - 1
    } else {
        end
    };
    sql.get(start..end.max(start)).unwrap_or("")
}

pub(super) fn is_string_prefix(word: &str) -> bool {
    [
        "e", "x", "b", "n", "_utf8mb4", "_binary", "_latin1", "_utf8",
    ]
    .iter()
    .any(|p| word.eq_ignore_ascii_case(p))
}

/// Past a line comment: to the next `\n` or `\r` (PostgreSQL ends one at either; ending it
/// early elsewhere only shows more of the text to the check).
pub(super) fn skip_line(bytes: &[u8], i: usize) -> usize {
    bytes[i..]
        .iter()
        .position(|&c| c == b'\n' || c == b'\r')
        .map_or(bytes.len(), |p| i + p + 1)
}

/// Past a `/* … */` comment starting at `i`; PostgreSQL's nest.
pub(super) fn skip_block_comment(bytes: &[u8], mut i: usize, nested: bool) -> usize {
    let mut depth = 0usize;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"/*") && (depth == 0 || nested) {
            depth += 1;
            i += 2;
        } else if bytes[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    bytes.len()
}

/// Past a literal or quoted identifier opened by `quote` at `i` (a doubled quote stays
/// inside; with `backslashes`, so does an escaped character).
pub(super) fn skip_quoted(bytes: &[u8], mut i: usize, quote: u8, backslashes: bool) -> usize {
    i += 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if backslashes => i += 2,
            c if c == quote => {
                if bytes.get(i + 1) == Some(&quote) {
                    i += 2;
                } else {
                    return i + 1;
                }
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Past a PostgreSQL `$n` parameter or `$tag$ … $tag$` string starting at `i`.
pub(super) fn skip_dollar(bytes: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    if bytes.get(j).is_some_and(u8::is_ascii_digit) {
        while bytes.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        return j;
    }
    while j < bytes.len() && bytes[j] != b'$' && is_word_byte(bytes[j]) {
        j += 1;
    }
    if bytes.get(j) != Some(&b'$') {
        return i + 1;
    }
    let tag = &bytes[i..=j];
    let body = j + 1;
    bytes[body..]
        .windows(tag.len())
        .position(|w| w == tag)
        .map_or(bytes.len(), |p| body + p + tag.len())
}

/// The statements of `tokens`, split at `;` outside the body of a trigger or routine
/// (`BEGIN … END`; on PostgreSQL `BEGIN ATOMIC … END`): each one's tokens and the byte
/// offset of the `;` that ends it (`None` for the last, if nothing ends it). Empty statements
/// are kept, so the offsets stay in step.
pub(super) type Split<'t, 'a> = Vec<(&'t [Token<'a>], Option<usize>)>;

pub(super) fn split<'t, 'a>(tokens: &'t [Token<'a>], dialect: Dialect) -> Split<'t, 'a> {
    let mut statements = Vec::new();
    let mut start = 0;
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate() {
        let statement = &tokens[start..i];
        let next = tokens.get(i + 1);
        match token {
            Token::Semicolon(at) if depth == 0 => {
                statements.push((statement, Some(*at)));
                start = i + 1;
            }
            Token::Word(_) if has_body(statement, dialect) => {
                let opens = match dialect {
                    Dialect::Postgres => token.is("begin") && next.is_some_and(|t| t.is("atomic")),
                    _ => token.is("begin"),
                };
                if opens || token.is("case") {
                    depth += 1;
                } else if token.is("end") {
                    let loop_end = next.is_some_and(|t| {
                        ["if", "loop", "while", "repeat", "for"]
                            .iter()
                            .any(|k| t.is(k))
                    });
                    if !loop_end {
                        depth = depth.saturating_sub(1);
                    }
                }
            }
            _ => {}
        }
    }
    statements.push((&tokens[start..], None));
    statements
}

/// Whether a statement (its tokens so far) creates a trigger or routine, whose body may
/// hold `;`: the first kind of object its words name after `CREATE` says so (`CREATE TABLE
/// log (event text, begin date)` creates a table).
pub(super) fn has_body(statement: &[Token<'_>], dialect: Dialect) -> bool {
    let Some(first) = statement.first() else {
        return false;
    };
    if !first.is("create") {
        return false;
    }
    const KINDS: [&str; 22] = [
        "table",
        "view",
        "index",
        "sequence",
        "type",
        "schema",
        "database",
        "role",
        "user",
        "domain",
        "extension",
        "aggregate",
        "operator",
        "policy",
        "rule",
        "server",
        "cast",
        "function",
        "procedure",
        "trigger",
        "event",
        "statistics",
    ];
    let kind = statement
        .iter()
        .skip(1)
        .find(|t| KINDS.iter().any(|k| t.is(k)));
    let bodies: &[&str] = match dialect {
        Dialect::Postgres => &["function", "procedure"],
        Dialect::Mysql => &["trigger", "procedure", "function", "event"],
        Dialect::Sqlite => &["trigger"],
    };
    kind.is_some_and(|t| bodies.iter().any(|k| t.is(k)))
}
