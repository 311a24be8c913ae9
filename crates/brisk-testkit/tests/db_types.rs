//! Every value type, both ways, on every backend, NULL included: booleans, integers, floats,
//! text, bytes, dates, times, timestamps with and without a zone (chrono and time), UUIDs,
//! JSON (as `serde_json::Value` and as a typed `Json<T>`), decimals and (PostgreSQL) arrays;
//! read by index, by name and into a struct; on a PostgreSQL whose `DateStyle` is not ISO and
//! whose `TimeZone` is not UTC, and a MariaDB in another time zone, so nothing may depend on
//! either. A mismatch names the column and both types.

use brisk::db::{params, Db, DbError, DbKind, DbOptions, Json, RowView, Value};
use brisk_testkit::*;
use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use rust_decimal::Decimal;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Prefs {
    theme: String,
    sizes: Vec<u8>,
}

/// One row of every type, as the struct a typed row fills.
#[derive(Debug, PartialEq, serde::Deserialize)]
struct Typed {
    id: i64,
    b: Option<bool>,
    i2: Option<i16>,
    i4: Option<i32>,
    i8: Option<i64>,
    f4: Option<f32>,
    f8: Option<f64>,
    t: Option<String>,
    d: Option<NaiveDate>,
    tm: Option<NaiveTime>,
    ts: Option<NaiveDateTime>,
    tz: Option<DateTime<Utc>>,
    u: Option<Uuid>,
    j: Option<Json<Prefs>>,
    n: Option<String>,
}

fn schema(kind: DbKind) -> &'static str {
    match kind {
        DbKind::Postgres => {
            "CREATE TABLE typed (id bigint PRIMARY KEY, b boolean, i2 smallint, i4 integer, \
             i8 bigint, f4 real, f8 double precision, t text, bin bytea, d date, tm time, \
             ts timestamp, tz timestamptz, u uuid, j jsonb, n numeric(12,3), \
             ints integer[], texts text[], stamps timestamptz[])"
        }
        DbKind::Mysql => {
            "CREATE TABLE typed (id BIGINT PRIMARY KEY, b BOOLEAN, i2 SMALLINT, i4 INT, \
             i8 BIGINT, f4 FLOAT, f8 DOUBLE, t TEXT CHARACTER SET utf8mb4, bin BLOB, d DATE, \
             tm TIME(6), ts DATETIME(6), tz TIMESTAMP(6) NULL, u CHAR(36), j JSON, \
             n DECIMAL(12,3))"
        }
        DbKind::Sqlite => {
            "CREATE TABLE typed (id INTEGER PRIMARY KEY, b BOOLEAN, i2 INTEGER, i4 INTEGER, \
             i8 INTEGER, f4 REAL, f8 REAL, t TEXT, bin BLOB, d DATE, tm TIME, ts TIMESTAMP, \
             tz TIMESTAMPTZ, u UUID, j JSON, n DECIMAL)"
        }
    }
}

async fn round_trip(db: &Db) {
    let kind = db.kind();
    db.execute_batch(schema(kind)).await.unwrap();
    let d = NaiveDate::from_ymd_opt(1999, 12, 31).unwrap();
    let tm = NaiveTime::from_hms_micro_opt(23, 59, 58, 123_456).unwrap();
    let ts = d.and_time(tm);
    let tz: DateTime<Utc> = "2026-11-26T23:30:00.654321Z".parse().unwrap();
    let u: Uuid = "67e55044-10b1-426f-9247-bb680e5fe0c8".parse().unwrap();
    let prefs = Prefs {
        theme: "dark".into(),
        sizes: vec![1, 2],
    };
    let n: Decimal = "-12345.678".parse().unwrap();
    let insert = "INSERT INTO typed (id, b, i2, i4, i8, f4, f8, t, bin, d, tm, ts, tz, u, j, n) \
                  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)";
    db.execute(
        insert,
        params![
            1,
            true,
            -32_768i16,
            i32::MIN,
            i64::MAX,
            1.5f32,
            -2.25e100,
            "héllo 'quoted' \"x\"",
            vec![0u8, 255, 10],
            d,
            tm,
            ts,
            tz,
            u,
            Json(prefs.clone()),
            n
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    let nulls: Vec<Value> = std::iter::once(Value::Int(2))
        .chain(std::iter::repeat_n(Value::Null, 15))
        .collect();
    db.execute(insert, nulls).await.unwrap();

    // By index and by name.
    let row = db
        .query_one("SELECT * FROM typed WHERE id = $1", params![1])
        .await
        .unwrap()
        .unwrap();
    assert!(row.by_name::<bool>("b").unwrap(), "{kind:?}");
    assert_eq!(row.by_name::<i16>("i2").unwrap(), -32_768);
    assert_eq!(row.by_name::<i32>("i4").unwrap(), i32::MIN);
    assert_eq!(row.by_name::<i64>("i8").unwrap(), i64::MAX);
    assert_eq!(row.by_name::<f32>("f4").unwrap(), 1.5);
    assert_eq!(row.by_name::<f64>("f8").unwrap(), -2.25e100);
    assert_eq!(row.by_name::<String>("t").unwrap(), "héllo 'quoted' \"x\"");
    assert_eq!(row.by_name::<Vec<u8>>("bin").unwrap(), [0, 255, 10]);
    assert_eq!(row.by_name::<NaiveDate>("d").unwrap(), d, "{kind:?}");
    assert_eq!(row.by_name::<NaiveTime>("tm").unwrap(), tm, "{kind:?}");
    assert_eq!(row.by_name::<NaiveDateTime>("ts").unwrap(), ts, "{kind:?}");
    assert_eq!(row.by_name::<DateTime<Utc>>("tz").unwrap(), tz, "{kind:?}");
    let odt = row.by_name::<time::OffsetDateTime>("tz").unwrap();
    assert_eq!(odt.unix_timestamp(), tz.timestamp(), "{kind:?}");
    assert_eq!(odt.microsecond(), 654_321);
    assert_eq!(row.by_name::<time::Date>("d").unwrap().year(), 1999);
    assert_eq!(row.by_name::<Uuid>("u").unwrap(), u, "{kind:?}");
    assert_eq!(
        row.by_name::<Json<Prefs>>("j").unwrap().0,
        prefs,
        "{kind:?}"
    );
    let json: serde_json::Value = row.by_name("j").unwrap();
    assert_eq!(json["theme"], "dark");
    assert_eq!(row.by_name::<Decimal>("n").unwrap(), n, "{kind:?}");
    assert_eq!(
        row.by_name::<String>("n").unwrap(),
        "-12345.678",
        "{kind:?}"
    );

    // Into a struct, both rows.
    let rows: Vec<Typed> = db
        .query_as("SELECT * FROM typed ORDER BY id", vec![])
        .await
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    assert_eq!(
        rows[0],
        Typed {
            id: 1,
            b: Some(true),
            i2: Some(-32_768),
            i4: Some(i32::MIN),
            i8: Some(i64::MAX),
            f4: Some(1.5),
            f8: Some(-2.25e100),
            t: Some("héllo 'quoted' \"x\"".into()),
            d: Some(d),
            tm: Some(tm),
            ts: Some(ts),
            tz: Some(tz),
            u: Some(u),
            j: Some(Json(prefs.clone())),
            n: Some("-12345.678".into()),
        },
        "{kind:?}"
    );
    assert_eq!(
        rows[1],
        Typed {
            id: 2,
            b: None,
            i2: None,
            i4: None,
            i8: None,
            f4: None,
            f8: None,
            t: None,
            d: None,
            tm: None,
            ts: None,
            tz: None,
            u: None,
            j: None,
            n: None,
        },
        "{kind:?}"
    );

    // Read in place (`query_map`; on PostgreSQL straight from the server's answer): the
    // same values as the rows above, NULLs included, by index and by name.
    let read = |row: &RowView<'_>| -> Result<Typed, DbError> {
        assert_eq!(row.len(), 16, "{kind:?}");
        assert_eq!(row.columns()[7], "t", "{kind:?}");
        Ok(Typed {
            id: row.get(0)?,
            b: row.by_name("B")?,
            i2: row.get(2)?,
            i4: row.get(3)?,
            i8: row.by_name("i8")?,
            f4: row.get(5)?,
            f8: row.get(6)?,
            t: row.by_name("t")?,
            d: row.by_name("d")?,
            tm: row.by_name("tm")?,
            ts: row.by_name("ts")?,
            tz: row.by_name("tz")?,
            u: row.by_name("u")?,
            j: row.by_name("j")?,
            n: row.by_name("n")?,
        })
    };
    let select = "SELECT id, b, i2, i4, i8, f4, f8, t, bin, d, tm, ts, tz, u, j, n \
                  FROM typed ORDER BY id";
    let mapped = db
        .query_map(select, vec![], read)
        .await
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    assert_eq!(mapped, rows, "{kind:?}");
    let bytes = db
        .query_map(select, vec![], |row| row.by_name::<Option<Vec<u8>>>("bin"))
        .await
        .unwrap();
    assert_eq!(bytes, [Some(vec![0, 255, 10]), None], "{kind:?}");
    // A mismatch names the column and both types; a column past the end says so; the
    // closure's error ends the reading and is what comes back.
    let err = db
        .query_map(select, vec![], |row| row.by_name::<i64>("t"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DbError::Decode(m) if m.contains("\"t\"") && m.contains("text") && m.contains("i64")),
        "{kind:?}: {err:?}"
    );
    let err = db
        .query_map(select, vec![], |row| row.get::<i64>(16))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DbError::Decode(m) if m.contains("column 16 of a row of 16 columns")),
        "{kind:?}: {err:?}"
    );
    let mut seen = 0;
    let err = db
        .query_map(select, vec![], |_| -> Result<(), DbError> {
            seen += 1;
            Err(DbError::Decode("the app's own reason".into()))
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DbError::Decode(m) if m == "the app's own reason"),
        "{kind:?}: {err:?}"
    );
    assert_eq!(seen, 1, "{kind:?}: the first error stops the reading");

    // Pipelined, each run read in place (`query_pipelined_map`): a run's rows, a run of no
    // rows, and a run whose row the closure refuses, which fails alone.
    let by_id = "SELECT id, i4 FROM typed WHERE id = $1";
    let lists = [1i64, 3, 2, 1].map(|id| vec![Value::from(id)]).to_vec();
    let read = |row: &RowView<'_>| -> Result<(i64, Option<i32>), DbError> {
        let id: i64 = row.get(0)?;
        if id == 2 {
            return Err(DbError::Decode("row 2 refused".into()));
        }
        Ok((id, row.get(1)?))
    };
    let runs = db
        .query_pipelined_map(by_id, lists, read)
        .await
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    assert_eq!(runs.len(), 4, "{kind:?}");
    for first in [&runs[0], &runs[3]] {
        assert_eq!(first.as_ref().unwrap(), &[(1, Some(i32::MIN))], "{kind:?}");
    }
    assert!(runs[1].as_ref().unwrap().is_empty(), "{kind:?}");
    assert!(
        matches!(&runs[2], Err(DbError::Decode(m)) if m == "row 2 refused"),
        "{kind:?}: {:?}",
        runs[2]
    );

    // Parameters compared in SQL find their rows: the server read them as the same values.
    let found: Option<i64> = db
        .query_scalar(
            "SELECT id FROM typed WHERE d = $1 AND ts = $2 AND tz = $3 AND u = $4",
            params![d, ts, tz, u],
        )
        .await
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    assert_eq!(found, Some(1), "{kind:?}");

    // A mismatch names the column and both types.
    let err = row.by_name::<i64>("t").unwrap_err();
    assert!(
        matches!(&err, DbError::Decode(m) if m.contains("\"t\"") && m.contains("text") && m.contains("i64")),
        "{kind:?}: {err:?}"
    );
}

#[test]
fn values_round_trip_on_postgresql_whatever_its_datestyle_and_time_zone() {
    let server = Postgres::start().unwrap();
    server
        .sql(
            "ALTER DATABASE brisk SET DateStyle = 'SQL, DMY'; \
             ALTER DATABASE brisk SET TimeZone = 'Asia/Kolkata'; \
             ALTER DATABASE brisk SET IntervalStyle = 'sql_standard'",
        )
        .unwrap();
    let db = Db::open(&server.url(), DbOptions::default()).unwrap();
    worker_runtime().block_on(async {
        let style: String = db
            .query_scalar(
                "SELECT current_setting('DateStyle') || ' ' || current_setting('TimeZone')",
                vec![],
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            style, "SQL, DMY Asia/Kolkata",
            "the session is not ISO, not UTC"
        );
        round_trip(&db).await;

        // Arrays, one and two dimensions, with NULLs.
        let stamps = vec![
            Value::from("2026-01-02T03:04:05Z".parse::<DateTime<Utc>>().unwrap()),
            Value::Null,
        ];
        db.execute(
            "UPDATE typed SET ints = $1, texts = $2, stamps = $3 WHERE id = 1",
            params![
                vec![1, -2, 3],
                vec!["a", "b,c", "\"q\""],
                Value::Array(stamps.clone())
            ],
        )
        .await
        .unwrap();
        let row = db
            .query_one(
                "SELECT ints, texts, stamps, ARRAY[[1,2],[3,4]] AS grid FROM typed WHERE id = 1",
                vec![],
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<Vec<i32>>(0).unwrap(), [1, -2, 3]);
        assert_eq!(row.get::<Vec<String>>(1).unwrap(), ["a", "b,c", "\"q\""]);
        assert_eq!(row.get::<Value>(2).unwrap(), Value::Array(stamps));
        let grid = Value::Array(vec![Value::array([1, 2]), Value::array([3, 4])]);
        assert_eq!(row.get::<Value>(3).unwrap(), grid);
        // A list where the statement wants an array: `= ANY($1)`, no text casts.
        let ids: Vec<i64> = db
            .query_as::<(i64,)>(
                "SELECT id FROM typed WHERE id = ANY($1) ORDER BY id",
                params![vec![1i64, 2, 9]],
            )
            .await
            .unwrap()
            .into_iter()
            .map(|(id,)| id)
            .collect();
        assert_eq!(ids, [1, 2]);
        // A decimal parameter keeps every digit; an integer fits a NUMERIC too.
        let big: String = db
            .query_scalar(
                "SELECT ($1::numeric + $2)::text",
                params![Value::Decimal("12345678901234567890.000000001".into()), 1],
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(big, "12345678901234567891.000000001");
        // The server's text for a type Brisk does not read.
        let interval: String = db
            .query_scalar("SELECT interval '1 day'", vec![])
            .await
            .unwrap()
            .unwrap();
        assert!(!interval.is_empty());
    });
}

#[test]
fn values_round_trip_on_mariadb_in_another_time_zone() {
    let server = MariaDb::start().unwrap();
    server.sql("SET GLOBAL time_zone = '+05:30'").unwrap();
    let db = Db::open(&server.url(), DbOptions::default()).unwrap();
    worker_runtime().block_on(async {
        round_trip(&db).await;
        // The instant is stored as UTC: another session in the server's zone sees it there.
        let stored = server
            .sql("SELECT UNIX_TIMESTAMP(tz) FROM brisk.typed WHERE id = 1")
            .unwrap();
        assert_eq!(stored.trim(), "1795735800.654321");
        let err = db
            .execute("UPDATE typed SET t = $1", params![vec![1, 2]])
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DbError::Refused(m) if m.contains("no arrays")),
            "{err:?}"
        );
    });
}

#[test]
fn values_round_trip_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("types.sqlite").display());
    let db = Db::open(&url, DbOptions::default()).unwrap();
    worker_runtime().block_on(async {
        round_trip(&db).await;
        // What SQLite keeps: ISO 8601 text that sorts in time order.
        let (tz, d): (String, String) = db
            .query_one_as("SELECT tz || '', d || '' FROM typed WHERE id = 1", vec![])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(tz, "2026-11-26T23:30:00.654321Z");
        assert_eq!(d, "1999-12-31");
        // Text that is no date in a DATE column (SQLite keeps what it is given) reads as
        // text, and as a date it is an error, not a panic.
        db.execute("UPDATE typed SET d = 'on 2026-01-0é' WHERE id = 2", vec![])
            .await
            .unwrap();
        db.execute("UPDATE typed SET d = '2026-01-0é' WHERE id = 2", vec![])
            .await
            .unwrap();
        let row = db
            .query_one("SELECT d FROM typed WHERE id = 2", vec![])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<String>(0).unwrap(), "2026-01-0é");
        assert!(row.get::<NaiveDate>(0).is_err());
    });
}
