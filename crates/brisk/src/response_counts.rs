//! HTTP responses counted by request method and status class: a fixed table of `Cell`s in a
//! worker (one add per response, nothing allocated), and [`ResponseCount`] rows in its
//! snapshots. Classes and a closed list of methods keep the number of series bounded, whatever
//! the requests: a raw path or an invented method never becomes a label.

use std::cell::Cell;

use serde::{Deserialize, Serialize};

/// The methods counted under their own name; any other counts as `OTHER`. Comparing
/// standard `Method`s compares their tags, not their names: cheap on every response.
const METHODS: [http::Method; 9] = [
    http::Method::GET,
    http::Method::HEAD,
    http::Method::POST,
    http::Method::PUT,
    http::Method::DELETE,
    http::Method::PATCH,
    http::Method::OPTIONS,
    http::Method::CONNECT,
    http::Method::TRACE,
];
/// The status classes; a code outside 100..=599 counts as `other`.
const CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];
const ROWS: usize = METHODS.len() + 1;

/// Responses by (method, status class) in one worker.
pub(crate) struct ResponseCounts {
    cells: [[Cell<u64>; CLASSES.len()]; ROWS],
}

impl Default for ResponseCounts {
    fn default() -> Self {
        ResponseCounts {
            cells: std::array::from_fn(|_| std::array::from_fn(|_| Cell::new(0))),
        }
    }
}

impl std::fmt::Debug for ResponseCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.snapshot()).finish()
    }
}

/// The row of a request method in [`ResponseCounts`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct MethodRow(usize);

impl MethodRow {
    /// The row of `method`.
    #[inline]
    pub(crate) fn of(method: &http::Method) -> Self {
        MethodRow(
            METHODS
                .iter()
                .position(|m| m == method)
                .unwrap_or(METHODS.len()),
        )
    }
}

impl ResponseCounts {
    /// Counts a response with status `code` to a request of method `row`.
    #[inline]
    pub(crate) fn count(&self, row: MethodRow, code: u16) {
        let class = match code {
            100..=599 => (code / 100 - 1) as usize,
            _ => CLASSES.len() - 1,
        };
        let c = &self.cells[row.0][class];
        c.set(c.get() + 1);
    }

    /// The counts that are not zero.
    pub(crate) fn snapshot(&self) -> Vec<ResponseCount> {
        let mut rows = Vec::new();
        for (m, cells) in self.cells.iter().enumerate() {
            for (c, n) in cells.iter().enumerate() {
                if n.get() > 0 {
                    rows.push(ResponseCount {
                        method: METHODS.get(m).map_or("OTHER", |m| m.as_str()).to_string(),
                        code: CLASSES[c].to_string(),
                        count: n.get(),
                    });
                }
            }
        }
        rows
    }
}

/// How many responses of one status class went to requests of one method.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResponseCount {
    /// `GET`, `POST`, … or `OTHER`.
    pub method: String,
    /// `1xx` to `5xx`, or `other`.
    pub code: String,
    /// Responses.
    pub count: u64,
}

/// Adds `more` into `into`, row by row (by method and code).
///
/// ```
/// use brisk::response_counts::{merge, ResponseCount};
///
/// let row = |code: &str, count| ResponseCount { method: "GET".into(), code: code.into(), count };
/// let mut all = vec![row("2xx", 3)];
/// merge(&mut all, &[row("2xx", 2), row("4xx", 1)]);
/// assert_eq!(all, vec![row("2xx", 5), row("4xx", 1)]);
/// ```
pub fn merge(into: &mut Vec<ResponseCount>, more: &[ResponseCount]) {
    for r in more {
        match into
            .iter_mut()
            .find(|x| x.method == r.method && x.code == r.code)
        {
            Some(x) => x.count += r.count,
            None => into.push(r.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_count_by_method_and_class_with_unknowns_bounded() {
        let c = ResponseCounts::default();
        let get = MethodRow::of(&http::Method::GET);
        let odd = MethodRow::of(&http::Method::from_bytes(b"BREW").unwrap());
        c.count(get, 200);
        c.count(get, 204);
        c.count(get, 404);
        c.count(odd, 501);
        c.count(odd, 999);
        let row = |method: &str, code: &str, count| ResponseCount {
            method: method.into(),
            code: code.into(),
            count,
        };
        assert_eq!(
            c.snapshot(),
            vec![
                row("GET", "2xx", 2),
                row("GET", "4xx", 1),
                row("OTHER", "5xx", 1),
                row("OTHER", "other", 1),
            ]
        );
    }
}
