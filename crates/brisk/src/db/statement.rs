//! What a statement does to the connection it runs on, read before it is sent.
//!
//! Single statements share connections: PostgreSQL's is one pipelined connection per worker,
//! and the others hand a pooled connection to one call after another. A statement that
//! starts or ends a transaction, or changes the session (`SET`, `LISTEN`, `PREPARE`, a
//! temporary table, a session lock…), would reach every caller after it: the writes of
//! other requests would run inside a transaction someone else rolls back. So such statements
//! are refused there with an error that names [`Db::transaction`](super::Db::transaction),
//! and inside a transaction only those that would end it behind Brisk's back or outlive it.
//!
//! The check lexes the SQL (quotes, dollar quotes, comments, each dialect's identifiers),
//! splits it into statements at `;` (a trigger's or routine's body is kept whole) and reads
//! each statement's leading keywords and the functions it calls. It is a pure function of
//! the text, run once per prepared statement on PostgreSQL. What it cannot see (a session
//! change made by dynamic SQL inside a function) is caught after the fact on PostgreSQL:
//! the driver rolls back a transaction left open and fails the calls that ran inside it.

use super::error::DbError;
pub(crate) use super::sql_lex::Dialect;
use super::sql_lex::{is_word_byte, lex, skip_block_comment, skip_line, skip_quoted, split, Token};

/// Where a statement is about to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A connection other callers use after (or, pipelined, beside) this one.
    Shared,
    /// A connection a transaction holds.
    Transaction,
}

/// Refuses `sql` (one statement or several separated by `;`) if a statement in it would
/// change the connection for later callers at `place`, saying which and what to use.
pub(crate) fn check(sql: &str, dialect: Dialect, place: Place) -> Result<(), DbError> {
    let tokens = lex(sql, dialect);
    for (statement, _) in split(&tokens, dialect) {
        if let Some(why) = refusal(statement, dialect, place) {
            return Err(DbError::Refused(why));
        }
    }
    Ok(())
}

/// Rewrites `$1`, `$2`… placeholders with `to(n)` outside literals, quoted identifiers and
/// comments (as `dialect` writes them), and not inside a name (`a$1`): how a backend that
/// does not number its parameters the PostgreSQL way (SQLite's `?N`, MySQL's `?`) runs the
/// same SQL. Returns the SQL and the parameter numbers in the order they appear, or why the
/// `given` parameters do not fit them (a number past them, or one of them unused).
#[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))]
pub(crate) fn rewrite_placeholders(
    sql: &str,
    dialect: Dialect,
    given: usize,
    to: impl Fn(usize) -> String,
) -> Result<(String, Vec<usize>), DbError> {
    let bytes = sql.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(sql.len());
    let mut order = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        let start = i;
        match b {
            b'-' if next == Some(b'-')
                && (dialect != Dialect::Mysql
                    || bytes.get(i + 2).is_none_or(|c| c.is_ascii_whitespace())) =>
            {
                i = skip_line(bytes, i);
            }
            b'#' if dialect == Dialect::Mysql => i = skip_line(bytes, i),
            b'/' if next == Some(b'*')
                && !(dialect == Dialect::Mysql && bytes.get(i + 2) == Some(&b'!')) =>
            {
                i = skip_block_comment(bytes, i, dialect == Dialect::Postgres);
            }
            b'\'' | b'"' => i = skip_quoted(bytes, i, b, dialect == Dialect::Mysql),
            b'`' => i = skip_quoted(bytes, i, b'`', false),
            b'[' if dialect == Dialect::Sqlite => {
                i = bytes[i..]
                    .iter()
                    .position(|&c| c == b']')
                    .map_or(bytes.len(), |p| i + p + 1);
            }
            b'$' if next.is_some_and(|d| d.is_ascii_digit())
                && !(i > 0 && is_word_byte(bytes[i - 1])) =>
            {
                let mut n = 0usize;
                i += 1;
                while let Some(d) = bytes.get(i).filter(|d| d.is_ascii_digit()) {
                    n = n.saturating_mul(10).saturating_add(usize::from(d - b'0'));
                    i += 1;
                }
                order.push(n);
                out.extend_from_slice(to(n).as_bytes());
                continue;
            }
            _ => i += 1,
        }
        out.extend_from_slice(&bytes[start..i.min(bytes.len())]);
    }
    let used = order.iter().copied().max().unwrap_or(0);
    if let Some(n) = order.iter().find(|&&n| n == 0 || n > given) {
        return Err(DbError::Refused(format!(
            "the statement uses ${n}, and {given} parameters are given"
        )));
    }
    if given > used {
        return Err(DbError::Refused(format!(
            "{given} parameters are given, and the statement uses {used}"
        )));
    }
    let out = String::from_utf8(out).expect("only ASCII placeholders were replaced");
    Ok((out, order))
}

/// Whether `sql` is `ROLLBACK TO [SAVEPOINT] name`, which mends a transaction after a
/// failed statement.
pub(crate) fn is_rollback_to(sql: &str, dialect: Dialect) -> bool {
    let tokens = lex(sql, dialect);
    let words: Vec<&Token<'_>> = tokens
        .iter()
        .filter(|t| matches!(t, Token::Word(_)))
        .collect();
    words.first().is_some_and(|t| t.is("rollback"))
        && words.iter().skip(1).take(2).any(|t| t.is("to"))
}

/// The statements of `sql` (separated by `;`, a trigger's or routine's body kept whole),
/// each trimmed, without empty ones: how a migration file runs one statement at a time, so
/// that a failure names its statement.
pub(crate) fn statements(sql: &str, dialect: Dialect) -> Vec<&str> {
    let tokens = lex(sql, dialect);
    let mut start = 0;
    let mut out = Vec::new();
    for (statement, end) in split(&tokens, dialect) {
        let end = end.unwrap_or(sql.len());
        if !statement.is_empty() {
            out.push(sql[start..end].trim());
        }
        start = (end + 1).min(sql.len());
    }
    out
}

/// Why `statement` may not run at `place`, if it may not.
fn refusal(statement: &[Token<'_>], dialect: Dialect, place: Place) -> Option<String> {
    let words: Vec<&Token<'_>> = statement
        .iter()
        .filter(|t| matches!(t, Token::Word(_)))
        .collect();
    // What a statement calls counts whatever it starts with (`(SELECT pg_advisory_lock(1))`).
    if let Some(why) = session_function(statement, dialect, place) {
        return Some(why);
    }
    if let Some(why) = temporary_object(statement, dialect, place) {
        return Some(why);
    }
    let first = statement.first()?;
    let Token::Word(head) = *first else {
        return None;
    };
    let second = words.get(1).copied();
    let shared = place == Place::Shared;
    let head_upper = head.to_ascii_uppercase();
    let is = |k: &str| first.is(k);
    let then = |k: &str| second.is_some_and(|t| t.is(k));
    let transaction = |what: &str| {
        if shared {
            format!(
                "{what} would hold the shared connection's transaction for every caller after \
                 it: run a transaction with db.transaction() or db.begin()"
            )
        } else {
            format!("{what} inside a transaction: end it with tx.commit() or tx.rollback()")
        }
    };
    let session = |what: &str| {
        let fix = if shared {
            "run it inside db.transaction() or db.begin()"
        } else {
            "a transaction's connection goes back to the pool after it"
        };
        format!("{what} would change the connection's session for every later caller: {fix}")
    };

    // Transaction control.
    let rollback_to = |words: &[&Token<'_>]| words.iter().skip(1).take(2).any(|t| t.is("to"));
    let ends_or_starts = match dialect {
        Dialect::Postgres => {
            is("begin")
                || is("start")
                || is("commit")
                || is("end")
                || is("abort")
                || (is("rollback") && !rollback_to(&words))
                || (is("prepare") && then("transaction"))
        }
        Dialect::Mysql => {
            is("begin")
                || is("start")
                || is("commit")
                || is("xa")
                || (is("rollback") && !rollback_to(&words))
        }
        Dialect::Sqlite => {
            is("begin") || is("commit") || is("end") || (is("rollback") && !rollback_to(&words))
        }
    };
    if ends_or_starts {
        return Some(transaction(&head_upper));
    }
    let savepoint = is("savepoint") || is("release") || is("rollback");
    if savepoint {
        // SAVEPOINT, RELEASE, ROLLBACK TO belong in a transaction.
        return shared.then(|| transaction(&head_upper));
    }

    // Statements that change the session.
    let refused_word = match dialect {
        Dialect::Postgres => {
            let set_in_transaction = is("set")
                && !shared
                && second
                    .is_some_and(|t| t.is("local") || t.is("transaction") || t.is("constraints"));
            let copy_in = is("copy")
                && statement
                    .windows(2)
                    .any(|w| w[0].is("from") && w[1].is("stdin"));
            if copy_in {
                return Some(
                    "COPY FROM STDIN: Brisk's PostgreSQL client does not send COPY data".into(),
                );
            }
            let declare_held = is("declare") && (shared || words.iter().any(|t| t.is("hold")));
            (is("set") && !set_in_transaction)
                || is("reset")
                || is("listen")
                || is("unlisten")
                || (is("prepare") && !then("transaction"))
                || is("deallocate")
                || is("discard")
                || is("load")
                || declare_held
        }
        Dialect::Mysql => {
            is("set")
                || is("prepare")
                || is("execute")
                || is("deallocate")
                || is("use")
                || is("handler")
                || is("lock")
                || is("unlock")
        }
        Dialect::Sqlite => (is("pragma") && pragma_sets(statement)) || is("attach") || is("detach"),
    };
    if refused_word {
        return Some(session(&head_upper));
    }
    if dialect == Dialect::Mysql && !shared {
        // MySQL commits the transaction itself before (and after) these.
        let implicit_commit = [
            "create",
            "alter",
            "drop",
            "rename",
            "truncate",
            "grant",
            "revoke",
            "analyze",
            "optimize",
            "repair",
            "flush",
            "install",
            "uninstall",
        ];
        if implicit_commit.iter().any(|k| is(k)) {
            return Some(format!(
                "{head_upper} inside a transaction: MySQL commits the transaction before it runs, \
                 so a rollback could not undo what came before; run it outside the transaction"
            ));
        }
    }
    None
}

/// The message for a statement that would change the session at `place`.
fn session_change(what: &str, place: Place) -> String {
    let fix = match place {
        Place::Shared => "run it inside db.transaction() or db.begin()",
        Place::Transaction => "a transaction's connection goes back to the pool after it",
    };
    format!("{what} would change the connection's session for every later caller: {fix}")
}

/// Why a call in `statement` would change the session beyond it, if one would: a
/// session-level lock, or `set_config` (in a transaction, allowed with the literal `true`
/// as its third argument: local to the transaction). A call is a name, quoted or not, whose
/// next token is `(`, whatever comments stand between.
fn session_function(statement: &[Token<'_>], dialect: Dialect, place: Place) -> Option<String> {
    for (i, token) in statement.iter().enumerate() {
        if statement.get(i + 1) != Some(&Token::Symbol(b'(')) {
            continue;
        }
        let names = |list: &[&str]| list.iter().any(|f| token.names(f));
        let why = match dialect {
            Dialect::Postgres
                if names(&[
                    "pg_advisory_lock",
                    "pg_advisory_lock_shared",
                    "pg_try_advisory_lock",
                    "pg_try_advisory_lock_shared",
                ]) =>
            {
                "a session-level advisory lock (use pg_advisory_xact_lock in a transaction)"
            }
            Dialect::Postgres if names(&["set_config"]) => {
                if place == Place::Transaction && third_argument_is_true(&statement[i + 1..]) {
                    continue;
                }
                "set_config(…) (in a transaction, set_config(name, value, true) is local to it)"
            }
            Dialect::Mysql if names(&["get_lock"]) => "GET_LOCK(…), a session-level lock",
            _ => continue,
        };
        return Some(session_change(why, place));
    }
    None
}

/// Whether the arguments in `call` (from its `(`) have exactly the keyword `true` as the
/// third: `set_config(name, value, true)`.
fn third_argument_is_true(call: &[Token<'_>]) -> bool {
    let mut depth = 0usize;
    let mut argument = 0usize;
    let mut third = Vec::new();
    for token in call {
        match token {
            Token::Symbol(b'(') => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            Token::Symbol(b')') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    break;
                }
            }
            Token::Symbol(b',') if depth == 1 => {
                argument += 1;
                continue;
            }
            _ => {}
        }
        if argument == 2 {
            third.push(*token);
        }
    }
    argument == 2 && third.len() == 1 && third[0].is("true")
}

/// Why `statement` would make a temporary object that outlives it, if it would:
/// `CREATE TEMP …`, `SELECT … INTO TEMP`, a name in the temporary schema (`pg_temp.t`,
/// SQLite's `temp.t`). In a PostgreSQL transaction, a temporary table dropped at its commit
/// (`ON COMMIT DROP`) is allowed.
fn temporary_object(statement: &[Token<'_>], dialect: Dialect, place: Place) -> Option<String> {
    let words: Vec<&Token<'_>> = statement
        .iter()
        .filter(|t| matches!(t, Token::Word(_)))
        .collect();
    let temp = |t: &Token<'_>| t.is("temp") || t.is("temporary");
    let created = words.first().is_some_and(|t| t.is("create"))
        && words.iter().skip(1).take(3).any(|t| temp(t));
    let into = words.windows(2).any(|w| w[0].is("into") && temp(w[1]));
    let schema = statement.windows(2).any(|w| {
        w[1] == Token::Symbol(b'.')
            && match dialect {
                Dialect::Postgres => w[0].names("pg_temp") || w[0].names("pg_temp_1"),
                Dialect::Sqlite => w[0].names("temp") || w[0].names("temporary"),
                Dialect::Mysql => false,
            }
    });
    if !(created || into || schema) {
        return None;
    }
    let dropped_at_commit = dialect == Dialect::Postgres
        && statement
            .windows(3)
            .any(|w| w[0].is("on") && w[1].is("commit") && w[2].is("drop"));
    if place == Place::Transaction && dropped_at_commit {
        return None;
    }
    Some(session_change("a temporary table", place))
}

/// Whether a `PRAGMA` sets a value (`= v`, or `(v)` but for the pragmas that take an argument
/// only to read: `table_info(t)`…).
fn pragma_sets(statement: &[Token<'_>]) -> bool {
    const READS: [&str; 15] = [
        "table_info",
        "table_xinfo",
        "table_list",
        "index_info",
        "index_xinfo",
        "index_list",
        "foreign_key_list",
        "foreign_key_check",
        "integrity_check",
        "quick_check",
        "collation_list",
        "pragma_list",
        "function_list",
        "module_list",
        "database_list",
    ];
    if statement.contains(&Token::Symbol(b'=')) {
        return true;
    }
    let Some(open) = statement.iter().position(|t| *t == Token::Symbol(b'(')) else {
        return false;
    };
    let name = open.checked_sub(1).and_then(|i| statement.get(i));
    !name.is_some_and(|n| READS.iter().any(|r| n.names(r)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Dialect::*;
    use Place::*;

    fn refused(sql: &str, dialect: Dialect, place: Place) -> bool {
        check(sql, dialect, place).is_err()
    }

    #[test]
    fn transaction_control_is_refused_on_the_shared_connection_in_every_spelling() {
        for sql in [
            "BEGIN",
            "begin",
            "  /* hi */ BEGIN ISOLATION LEVEL SERIALIZABLE",
            "-- comment\nSTART TRANSACTION",
            "COMMIT",
            "end",
            "ROLLBACK",
            "abort",
            "SAVEPOINT a",
            "RELEASE a",
            "ROLLBACK TO a",
            "SELECT 1; BEGIN",
            "INSERT INTO t VALUES ('x;y'); COMMIT",
            "PREPARE TRANSACTION 'x'",
        ] {
            assert!(refused(sql, Postgres, Shared), "{sql}");
        }
        for sql in [
            "BEGIN",
            "START TRANSACTION",
            "XA START 'x'",
            "commit",
            "/*!40101 BEGIN*/",
        ] {
            assert!(refused(sql, Mysql, Shared), "{sql}");
        }
        for sql in [
            "BEGIN IMMEDIATE",
            "COMMIT",
            "END TRANSACTION",
            "SAVEPOINT x",
        ] {
            assert!(refused(sql, Sqlite, Shared), "{sql}");
        }
        let e = check("BEGIN", Postgres, Shared).unwrap_err().to_string();
        assert!(e.contains("db.transaction()"), "{e}");
    }

    #[test]
    fn session_changes_are_refused_on_the_shared_connection() {
        for sql in [
            "SET search_path TO other",
            "SET ROLE admin",
            "set local x = 1",
            "RESET ALL",
            "LISTEN ch",
            "PREPARE p AS SELECT 1",
            "DEALLOCATE ALL",
            "DISCARD ALL",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "CREATE TEMP TABLE t (x int)",
            "create temporary table t (x int)",
            "SELECT set_config('search_path', 'x', false)",
            "SELECT set_config('search_path', $1, $2)",
            "SELECT set_config('app.user', $1, true)",
            "SELECT pg_advisory_lock(1)",
            "COPY t FROM STDIN",
        ] {
            assert!(refused(sql, Postgres, Shared), "{sql}");
        }
        for sql in [
            "SET @a = 1",
            "SET NAMES latin1",
            "USE other",
            "SELECT GET_LOCK('x', 1)",
            "LOCK TABLES t WRITE",
            "CREATE TEMPORARY TABLE t (x int)",
        ] {
            assert!(refused(sql, Mysql, Shared), "{sql}");
        }
        for sql in [
            "PRAGMA foreign_keys = OFF",
            "ATTACH 'x.db' AS x",
            "CREATE TEMP TABLE t(x)",
        ] {
            assert!(refused(sql, Sqlite, Shared), "{sql}");
        }
    }

    #[test]
    fn what_hides_behind_comments_quotes_parentheses_and_names_is_seen() {
        for sql in [
            "-- x\rSET synchronous_commit = off",
            "(SELECT set_config('search_path', 'x', false))",
            "(SELECT pg_advisory_lock(1))",
            "SELECT set_config/**/('search_path', 'x', false)",
            "SELECT \"set_config\"('search_path', 'x', false)",
            "SELECT pg_catalog.set_config('search_path', 'x', false)",
            "SELECT set_config('search_path', 'x', true)",
            "SELECT 1 INTO TEMP t",
            "CREATE TABLE pg_temp.users (id int)",
            "CREATE TABLE \"pg_temp\".users (id int)",
        ] {
            assert!(refused(sql, Postgres, Shared), "{sql}");
        }
        for sql in [
            "SELECT set_config('search_path', 'x', true AND false)",
            "SELECT set_config('search_path', 'x', false)",
            "SELECT 1 INTO TEMPORARY t",
        ] {
            assert!(refused(sql, Postgres, Transaction), "{sql}");
        }
        for sql in [
            "(SELECT GET_LOCK('x', 0))",
            "SELECT GET_LOCK /**/ ('x', 0)",
            "SELECT `get_lock`('x', 0)",
            "CREATE TABLE log (event VARCHAR(9), begin DATETIME); SET time_zone = '+05:00'",
        ] {
            assert!(refused(sql, Mysql, Shared), "{sql}");
        }
        for sql in [
            "PRAGMA synchronous(OFF)",
            "PRAGMA foreign_keys(0)",
            "CREATE TABLE temp.t (x)",
            "CREATE TRIGGER temp.tr AFTER INSERT ON o BEGIN SELECT 1; END",
            "CREATE TABLE t (trigger int, begin int); PRAGMA query_only = 0",
        ] {
            assert!(refused(sql, Sqlite, Shared), "{sql}");
        }
        assert!(!refused("PRAGMA table_info(t)", Sqlite, Shared));
        assert!(!refused("PRAGMA main.index_list(t)", Sqlite, Shared));
    }

    #[test]
    fn ordinary_statements_and_keywords_in_literals_comments_and_names_pass() {
        for sql in [
            "SELECT id, randomnumber FROM world WHERE id = $1",
            "SELECT 'BEGIN; SET x = 1'",
            "SELECT $$BEGIN; COMMIT$$, $tag$ ROLLBACK $tag$",
            "SELECT E'it\\'s; BEGIN'",
            "/* BEGIN; /* nested */ COMMIT */ SELECT 1",
            "SELECT \"begin\", \"set\" FROM \"commit\"",
            "UPDATE t SET x = 1 WHERE id = $1",
            "INSERT INTO settings (k) VALUES ('a') ON CONFLICT (k) DO UPDATE SET k = excluded.k",
            "SELECT pg_advisory_xact_lock(1)",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "COPY t TO STDOUT",
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END; SELECT 2",
            "SELECT 1e5, 2.5, x$1 FROM t",
        ] {
            assert!(!refused(sql, Postgres, Shared), "{sql}");
        }
        for sql in [
            "SELECT 'it\\'s; BEGIN'",
            "SELECT `begin` FROM t # BEGIN",
            "UPDATE t SET x = 1",
            "INSERT INTO t VALUES (1) ON DUPLICATE KEY UPDATE x = 2",
            "CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW BEGIN IF NEW.x < 0 THEN SET NEW.x = 0; END IF; END",
        ] {
            assert!(!refused(sql, Mysql, Shared), "{sql}");
        }
        for sql in [
            "PRAGMA journal_mode",
            "PRAGMA table_info(t)",
            "SELECT [begin] FROM t",
            "CREATE TRIGGER tr AFTER INSERT ON t BEGIN UPDATE c SET n = CASE WHEN n > 0 THEN n + 1 ELSE 1 END; END; SELECT 1",
        ] {
            assert!(!refused(sql, Sqlite, Shared), "{sql}");
        }
    }

    #[test]
    fn a_transaction_takes_savepoints_and_local_settings_but_not_its_own_end() {
        for sql in [
            "SAVEPOINT a",
            "RELEASE SAVEPOINT a",
            "ROLLBACK TO SAVEPOINT a",
            "SET LOCAL search_path TO x",
            "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            "SET CONSTRAINTS ALL DEFERRED",
            "LOCK TABLE t IN EXCLUSIVE MODE",
            "DECLARE c CURSOR FOR SELECT 1",
            "CREATE TEMP TABLE t (x int) ON COMMIT DROP",
            "SELECT set_config('app.user', $1, true)",
        ] {
            assert!(!refused(sql, Postgres, Transaction), "{sql}");
        }
        for sql in [
            "COMMIT",
            "ROLLBACK",
            "BEGIN",
            "SET search_path TO x",
            "SET SESSION x = 1",
            "CREATE TEMP TABLE t (x int)",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
        ] {
            assert!(refused(sql, Postgres, Transaction), "{sql}");
        }
        assert!(!refused("SAVEPOINT a", Mysql, Transaction));
        assert!(!refused("ROLLBACK TO a", Mysql, Transaction));
        assert!(refused("CREATE TABLE t (x int)", Mysql, Transaction));
        assert!(refused("COMMIT", Mysql, Transaction));
        assert!(!refused("ROLLBACK TO x", Sqlite, Transaction));
        assert!(refused("END", Sqlite, Transaction));
        let e = check("COMMIT", Postgres, Transaction)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tx.commit()"), "{e}");
    }

    #[test]
    fn a_file_splits_into_its_statements_with_bodies_kept_whole() {
        let sql = "-- schema\nCREATE TABLE a (x text DEFAULT ';');\n\n\
                   CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END;\n\
                   INSERT INTO a VALUES ($$;$$); -- done\n";
        assert_eq!(
            statements(sql, Postgres),
            [
                "-- schema\nCREATE TABLE a (x text DEFAULT ';')",
                "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END",
                "INSERT INTO a VALUES ($$;$$)",
            ]
        );
        let trigger = "CREATE TRIGGER t AFTER INSERT ON a BEGIN UPDATE b SET n = n + 1; END;";
        assert_eq!(statements(trigger, Sqlite), [&trigger[..trigger.len() - 1]]);
        assert!(statements(" ; -- nothing\n", Mysql).is_empty());
    }

    #[test]
    fn rollback_to_a_savepoint_is_told_apart() {
        for d in [Postgres, Mysql, Sqlite] {
            assert!(is_rollback_to("ROLLBACK TO SAVEPOINT before_dup", d));
            assert!(is_rollback_to("rollback work to a", d));
            assert!(!is_rollback_to("ROLLBACK", d));
            assert!(!is_rollback_to("SELECT 1", d));
        }
    }

    #[test]
    fn placeholders_are_rewritten_outside_literals_names_and_comments() {
        let question = |_| "?".to_string();
        let (sql, order) = rewrite_placeholders(
            "SELECT '$1', a$1, `$2`, \"$3\" FROM t -- $9\nWHERE b = $2 AND c = $1 # $8",
            Mysql,
            2,
            question,
        )
        .unwrap();
        assert_eq!(
            sql,
            "SELECT '$1', a$1, `$2`, \"$3\" FROM t -- $9\nWHERE b = ? AND c = ? # $8"
        );
        assert_eq!(order, vec![2, 1]);
        let (sql, _) =
            rewrite_placeholders("x = 'it\\'s $5' and y = $1", Mysql, 1, question).unwrap();
        assert_eq!(sql, "x = 'it\\'s $5' and y = ?");
        let (sql, _) = rewrite_placeholders("x = $1 or [$2] = $1 /* $3 */", Sqlite, 1, |n| {
            format!("?{n}")
        })
        .unwrap();
        assert_eq!(sql, "x = ?1 or [$2] = ?1 /* $3 */");
        let e = rewrite_placeholders("x = $2", Sqlite, 1, question)
            .unwrap_err()
            .to_string();
        assert!(e.contains("$2"), "{e}");
        let e = rewrite_placeholders("x = $1", Sqlite, 2, question)
            .unwrap_err()
            .to_string();
        assert!(e.contains("uses 1"), "{e}");
        assert!(rewrite_placeholders("x = $0", Sqlite, 0, question).is_err());
        assert_eq!(
            rewrite_placeholders("é = $1 — ü", Sqlite, 1, question)
                .unwrap()
                .0,
            "é = ? — ü"
        );
    }

    #[test]
    fn unterminated_input_ends_without_panicking() {
        for sql in [
            "'",
            "\"",
            "$a$",
            "/*",
            "`",
            "[",
            "E'\\",
            "$",
            "--",
            "SELECT $1",
        ] {
            for d in [Postgres, Mysql, Sqlite] {
                let _ = check(sql, d, Shared);
            }
        }
    }
}
