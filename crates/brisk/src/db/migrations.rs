//! [`Migrations`]: the schema as SQL files applied in order, once each, recorded in a table
//! `brisk_migrations` with a checksum of each file, so that a file edited after it ran is an
//! error rather than a silent difference between databases.
//!
//! Files are named `NNNN_what_it_does.sql` (the number is the version; its digits and the
//! order they sort in are the file's place) and embedded at build time by
//! [`migrations!`](crate::migrations) or read at run time by [`Migrations::from_dir`]. Each
//! runs in a transaction of its own where the backend allows it (PostgreSQL and SQLite; MySQL
//! commits DDL as it runs), one statement at a time, so that a failure names its file, its
//! statement and the server's reason, and leaves nothing of the file behind (but on MySQL).
//!
//! Two instances starting together apply each file once: PostgreSQL and MySQL hold a lock
//! for the whole run (`pg_advisory_lock`, `GET_LOCK`), SQLite takes its write lock for each
//! file and looks again at what is applied under it. [`App::migrate`](crate::App::migrate)
//! runs them once per start, before any worker accepts a connection.

use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::database::{Db, DbKind};
use super::error::DbError;
use super::session::Session;
use super::statement::{statements, Dialect};
use super::value::Value;

/// The lock PostgreSQL's advisory lock and MySQL's `GET_LOCK` take for a run: any number, the
/// same in every instance.
const LOCK_KEY: i64 = 0x6272_6973_6b00_0001;
/// How long a run waits for another instance's (its lock, SQLite's write lock) before it fails.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(600);
/// How often it tries the lock meanwhile.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// One migration file.
#[derive(Debug, Clone)]
pub struct Migration {
    /// Its version: the number its name starts with.
    pub version: i64,
    /// Its file name (`0001_create_rooms.sql`).
    pub name: String,
    /// Its SQL.
    pub sql: Cow<'static, str>,
    /// SHA-256 of the SQL, in hex: what `brisk_migrations` keeps to notice an edit.
    pub checksum: String,
}

/// What a migration's record says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationState {
    /// Applied, from the same SQL.
    Applied,
    /// Not applied yet.
    Pending,
    /// Applied from SQL with another checksum: the file was edited since.
    Edited,
}

/// Why migrations could not run.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The database could not be reached, locked or read.
    #[error("cannot run the migrations: {0}")]
    Db(#[from] DbError),
    /// A file's name or place in the order is wrong.
    #[error("migration {file}: {why}")]
    BadFile {
        /// The file.
        file: String,
        /// What is wrong with it.
        why: String,
    },
    /// A statement of a file failed; nothing of the file was kept (but on MySQL).
    #[error("migration {file} failed at its statement {index}:\n    {statement}\n{error}")]
    Failed {
        /// The file.
        file: String,
        /// Which statement (from 1).
        index: usize,
        /// The statement.
        statement: String,
        /// The server's reason.
        error: Box<DbError>,
    },
    /// A file applied earlier was edited since.
    #[error(
        "migration {file} was applied from other SQL (checksum {applied}, the file's is \
         {now}): a file that ran must not change; add a new migration instead"
    )]
    Edited {
        /// The file.
        file: String,
        /// The checksum recorded when it ran.
        applied: String,
        /// The file's checksum now.
        now: String,
    },
    /// The database has a migration this build does not have (a newer build ran it).
    #[error(
        "the database has migration {version} ({name}), which this build does not have: a \
         newer build applied it (Migrations::ignore_unknown to start anyway)"
    )]
    Unknown {
        /// Its version.
        version: i64,
        /// Its file's name when it ran.
        name: String,
    },
}

/// The migrations of an app, in version order.
///
/// ```no_run
/// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::MigrateError> {
/// let migrations = brisk::db::Migrations::from_dir("migrations")?;
/// for applied in migrations.run(&db).await? {
///     println!("applied {applied}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Migrations {
    list: Vec<Migration>,
    problem: Option<(String, String)>,
    ignore_unknown: bool,
}

impl Migrations {
    /// The files `(name, sql)` [`migrations!`](crate::migrations) embedded. A name that is not
    /// `NNNN_….sql`, or a version used twice, fails [`run`](Self::run).
    pub fn embedded(files: &[(&'static str, &'static str)]) -> Self {
        let mut problem = None;
        let mut list = Vec::new();
        for (name, sql) in files {
            match Migration::new(name, Cow::Borrowed(sql)) {
                Ok(m) => list.push(m),
                Err(e) => problem = problem.or(Some(e)),
            }
        }
        Self::sorted(list, problem)
    }

    /// The `*.sql` files of directory `dir`, read now.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, MigrateError> {
        let dir = dir.as_ref();
        let bad = |why: String| MigrateError::BadFile {
            file: dir.display().to_string(),
            why,
        };
        let mut list = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| bad(e.to_string()))? {
            let path = entry.map_err(|e| bad(e.to_string()))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("sql") {
                continue;
            }
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let sql = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
            list.push(
                Migration::new(name, Cow::Owned(sql))
                    .map_err(|(file, why)| MigrateError::BadFile { file, why })?,
            );
        }
        let migrations = Self::sorted(list, None);
        match migrations.problem {
            Some((file, why)) => Err(MigrateError::BadFile { file, why }),
            None => Ok(migrations),
        }
    }

    fn sorted(mut list: Vec<Migration>, mut problem: Option<(String, String)>) -> Self {
        list.sort_by_key(|m| m.version);
        for pair in list.windows(2) {
            if pair[0].version == pair[1].version && problem.is_none() {
                problem = Some((
                    pair[1].name.clone(),
                    format!("version {} is {}'s too", pair[1].version, pair[0].name),
                ));
            }
        }
        Migrations {
            list,
            problem,
            ignore_unknown: false,
        }
    }

    /// Whether a migration the database has and this build does not is left alone (`true`)
    /// or fails the run (`false`, the default: an older build should not run against a
    /// newer schema unawares).
    pub fn ignore_unknown(mut self, ignore: bool) -> Self {
        self.ignore_unknown = ignore;
        self
    }

    /// The migrations, in version order.
    pub fn list(&self) -> &[Migration] {
        &self.list
    }

    /// Applies the migrations not applied yet, in order; the names of those it applied.
    pub async fn run(&self, db: &Db) -> Result<Vec<String>, MigrateError> {
        if let Some((file, why)) = &self.problem {
            return Err(MigrateError::BadFile {
                file: file.clone(),
                why: why.clone(),
            });
        }
        let mut session = db.session().await?;
        let kind = session.kind();
        lock(&mut session).await?;
        session.run(table(kind)).await?;
        let mut applied = Vec::new();
        let recorded = self.check(&mut session).await?;
        for m in &self.list {
            if recorded.iter().any(|(v, _, _)| *v == m.version) {
                continue;
            }
            if self.apply(&mut session, m).await? {
                tracing::info!("migration {} applied", m.name);
                applied.push(m.name.clone());
            }
        }
        Ok(applied)
    }

    /// Each migration and whether it is applied, pending or edited since it ran.
    pub async fn status(&self, db: &Db) -> Result<Vec<(Migration, MigrationState)>, MigrateError> {
        let mut session = db.session().await?;
        session.run(table(session.kind())).await?;
        let recorded = recorded(&mut session).await?;
        Ok(self
            .list
            .iter()
            .map(|m| {
                let state = match recorded.iter().find(|(v, _, _)| *v == m.version) {
                    None => MigrationState::Pending,
                    Some((_, _, sum)) if *sum == m.checksum => MigrationState::Applied,
                    Some(_) => MigrationState::Edited,
                };
                (m.clone(), state)
            })
            .collect())
    }

    /// What is recorded, checked against the files: an edited file or (unless told to
    /// ignore it) a migration this build does not have fails the run.
    async fn check(
        &self,
        session: &mut Session,
    ) -> Result<Vec<(i64, String, String)>, MigrateError> {
        let recorded = recorded(session).await?;
        for (version, name, checksum) in &recorded {
            match self.list.iter().find(|m| m.version == *version) {
                Some(m) if m.checksum != *checksum => {
                    return Err(MigrateError::Edited {
                        file: m.name.clone(),
                        applied: checksum.clone(),
                        now: m.checksum.clone(),
                    })
                }
                Some(_) => {}
                None if self.ignore_unknown => {}
                None => {
                    return Err(MigrateError::Unknown {
                        version: *version,
                        name: name.clone(),
                    })
                }
            }
        }
        Ok(recorded)
    }

    /// Applies `m` in a transaction where the backend allows; `false` if another instance
    /// applied it meanwhile (SQLite, which looks again under its write lock).
    async fn apply(&self, session: &mut Session, m: &Migration) -> Result<bool, MigrateError> {
        let kind = session.kind();
        let transactional = kind != DbKind::Mysql;
        if transactional {
            if kind == DbKind::Sqlite {
                // SQLite's write lock, waited for while another instance holds it.
                let started = Instant::now();
                loop {
                    match session.run("BEGIN IMMEDIATE").await {
                        Ok(()) => break,
                        Err(DbError::Unavailable(why)) if started.elapsed() < LOCK_WAIT => {
                            tracing::info!("migrations: waiting for SQLite's write lock ({why})");
                            tokio::time::sleep(LOCK_RETRY).await;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            } else {
                session.run("BEGIN").await?;
            }
        }
        let result = self.apply_in(session, m, kind).await;
        let end = match &result {
            Ok(true) => "COMMIT",
            _ => "ROLLBACK",
        };
        if transactional {
            if let Err(e) = session.run(end).await {
                if result.is_ok() {
                    return Err(e.into());
                }
            }
        }
        result
    }

    async fn apply_in(
        &self,
        session: &mut Session,
        m: &Migration,
        kind: DbKind,
    ) -> Result<bool, MigrateError> {
        if kind == DbKind::Sqlite {
            let again = session
                .query(
                    "SELECT checksum FROM brisk_migrations WHERE version = $1",
                    vec![m.version.into()],
                )
                .await?;
            if !again.is_empty() {
                return Ok(false);
            }
        }
        let started = Instant::now();
        let dialect = match kind {
            DbKind::Postgres => Dialect::Postgres,
            DbKind::Mysql => Dialect::Mysql,
            DbKind::Sqlite => Dialect::Sqlite,
        };
        for (i, statement) in statements(&m.sql, dialect).into_iter().enumerate() {
            if let Err(error) = session.run(statement).await {
                return Err(MigrateError::Failed {
                    file: m.name.clone(),
                    index: i + 1,
                    statement: statement.to_string(),
                    error: Box::new(error),
                });
            }
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        session
            .query(
                "INSERT INTO brisk_migrations (version, name, checksum, applied_at, duration_ms) \
                 VALUES ($1, $2, $3, $4, $5)",
                vec![
                    m.version.into(),
                    m.name.clone().into(),
                    m.checksum.clone().into(),
                    Value::TimestampTz(now),
                    (started.elapsed().as_millis() as i64).into(),
                ],
            )
            .await?;
        Ok(true)
    }
}

impl Migration {
    /// A migration from file `name` holding `sql`, or (file, why) it cannot be one.
    fn new(name: &str, sql: Cow<'static, str>) -> Result<Migration, (String, String)> {
        let bad = |why: &str| (name.to_string(), why.to_string());
        let stem = name
            .strip_suffix(".sql")
            .ok_or_else(|| bad("a migration file's name ends in .sql"))?;
        let digits: String = stem.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() || !stem[digits.len()..].starts_with('_') {
            return Err(bad("a migration file's name is NNNN_what_it_does.sql"));
        }
        let version = digits
            .parse()
            .map_err(|_| bad("its version does not fit an i64"))?;
        let checksum = Sha256::digest(sql.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Migration {
            version,
            name: name.to_string(),
            sql,
            checksum,
        })
    }
}

/// Waits for the run's lock (PostgreSQL, MySQL), held until the session ends, trying it
/// every 200 ms for up to 10 minutes while another instance runs its migrations.
async fn lock(session: &mut Session) -> Result<(), DbError> {
    let try_lock = match session.kind() {
        DbKind::Postgres => "SELECT pg_try_advisory_lock($1)",
        DbKind::Mysql => "SELECT GET_LOCK($1, 0)",
        // SQLite's write lock, per migration.
        DbKind::Sqlite => return Ok(()),
    };
    let key: Value = match session.kind() {
        DbKind::Mysql => format!("brisk_migrations_{LOCK_KEY}").into(),
        _ => LOCK_KEY.into(),
    };
    let started = Instant::now();
    let mut said = false;
    loop {
        let rows = session.query(try_lock, vec![key.clone()]).await?;
        let got = rows.first().map(|r| r.get::<bool>(0)).transpose()?;
        if got == Some(true) {
            return Ok(());
        }
        if started.elapsed() > LOCK_WAIT {
            return Err(DbError::Unavailable(format!(
                "another instance held the migrations' lock for {} s",
                LOCK_WAIT.as_secs()
            )));
        }
        if !said {
            tracing::info!("migrations: waiting for another instance's run");
            said = true;
        }
        tokio::time::sleep(LOCK_RETRY).await;
    }
}

/// The table of applied migrations, in the backend's types.
fn table(kind: DbKind) -> &'static str {
    match kind {
        DbKind::Postgres => {
            "CREATE TABLE IF NOT EXISTS brisk_migrations (version bigint PRIMARY KEY, \
             name text NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL, \
             duration_ms bigint NOT NULL)"
        }
        DbKind::Mysql => {
            "CREATE TABLE IF NOT EXISTS brisk_migrations (version BIGINT PRIMARY KEY, \
             name VARCHAR(255) NOT NULL, checksum CHAR(64) NOT NULL, \
             applied_at DATETIME(6) NOT NULL, duration_ms BIGINT NOT NULL)"
        }
        DbKind::Sqlite => {
            "CREATE TABLE IF NOT EXISTS brisk_migrations (version INTEGER PRIMARY KEY, \
             name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL, \
             duration_ms INTEGER NOT NULL)"
        }
    }
}

/// What `brisk_migrations` holds: (version, name, checksum), in version order.
async fn recorded(session: &mut Session) -> Result<Vec<(i64, String, String)>, DbError> {
    let rows = session
        .query(
            "SELECT version, name, checksum FROM brisk_migrations ORDER BY version",
            vec![],
        )
        .await?;
    rows.iter()
        .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_ordered_by_version_and_bad_names_are_refused() {
        let m = Migrations::embedded(&[("0002_b.sql", "SELECT 2"), ("0001_a.sql", "SELECT 1")]);
        let names: Vec<&str> = m.list().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["0001_a.sql", "0002_b.sql"]);
        assert_eq!(m.list()[0].checksum.len(), 64);
        for bad in ["create.sql", "0001-a.sql", "0001_a.txt", "_a.sql"] {
            let m = Migrations::embedded(&[(bad, "")]);
            assert!(m.problem.is_some(), "{bad}");
        }
        let twice = Migrations::embedded(&[("0001_a.sql", ""), ("01_b.sql", "")]);
        assert!(twice
            .problem
            .is_some_and(|(_, why)| why.contains("version 1")));
    }
}
