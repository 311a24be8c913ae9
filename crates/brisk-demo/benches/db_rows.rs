//! What typed rows cost per row, against reading values by index: the two-integer World row
//! of `/db` and `/queries`, and the five-column chat message of `/api` (UUIDs, text, an
//! instant), read by index into a struct by hand and by `Row::decode` (serde, by column
//! name). No database: the rows are built as the backends build them.
//!
//! ```text
//! cargo bench -p brisk-demo --bench db_rows
//! ```

use std::hint::black_box;
use std::sync::Arc;

use brisk::db::{Row, Value};
use chrono::{DateTime, Utc};
use criterion::{criterion_group, criterion_main, Criterion};
use uuid::Uuid;

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct World {
    id: i32,
    randomnumber: i32,
}

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Message {
    id: Uuid,
    room_id: Uuid,
    author: String,
    text: String,
    created_at: DateTime<Utc>,
}

fn columns(names: &[&str]) -> Arc<[String]> {
    names.iter().map(|n| n.to_string()).collect()
}

fn rows(c: &mut Criterion) {
    let world = Row::new(
        columns(&["id", "randomnumber"]),
        vec![Value::Int(4_321), Value::Int(8_765)],
    );
    let message = Row::new(
        columns(&["id", "room_id", "author", "text", "created_at"]),
        vec![
            Value::Uuid(*Uuid::now_v7().as_bytes()),
            Value::Uuid(*Uuid::now_v7().as_bytes()),
            Value::Text("ann".into()),
            Value::Text("hello, room: the build is green again".into()),
            Value::TimestampTz(1_764_201_600_123_456),
        ],
    );
    c.bench_function("world by index", |b| {
        b.iter(|| {
            let row = black_box(&world);
            World {
                id: row.get(0).unwrap(),
                randomnumber: row.get(1).unwrap(),
            }
        })
    });
    c.bench_function("world by Row::decode", |b| {
        b.iter(|| black_box(&world).decode::<World>().unwrap())
    });
    c.bench_function("message by index", |b| {
        b.iter(|| {
            let row = black_box(&message);
            Message {
                id: row.get(0).unwrap(),
                room_id: row.get(1).unwrap(),
                author: row.get(2).unwrap(),
                text: row.get(3).unwrap(),
                created_at: row.get(4).unwrap(),
            }
        })
    });
    c.bench_function("message by Row::decode", |b| {
        b.iter(|| black_box(&message).decode::<Message>().unwrap())
    });
}

criterion_group!(benches, rows);
criterion_main!(benches);
