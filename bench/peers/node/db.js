// The database tests of the Node.js peer, by the rules in
// shared/reference/techempower-rules.md: /db, /queries?queries=N, /fortunes,
// /updates?queries=N, /cached-queries?count=N and /r5, over PostgreSQL with
// node-postgres (`pg`). One pg.Pool per process; every statement is a named
// query, so each connection prepares it once and then only executes it.
// The tables (world, fortune) are not created here.
'use strict';
const { Pool } = require('pg');

const PATHS = new Set(['/db', '/queries', '/fortunes', '/updates', '/cached-queries', '/r5']);
const WORLD_ROWS = 10000;
const MAX_QUERIES = 500;

const SELECT_WORLD = 'SELECT id, randomnumber FROM world WHERE id = $1';
const SELECT_TOP = 'SELECT id, randomnumber FROM world ORDER BY id LIMIT 5';
const SELECT_ALL = 'SELECT id, randomnumber FROM world';
const SELECT_FORTUNES = 'SELECT id, message FROM fortune';
// One statement for the whole batch: the pairs arrive as two arrays.
const UPDATE_WORLDS =
  'UPDATE world SET randomnumber = v.r FROM unnest($1::int[], $2::int[]) AS v(id, r) WHERE world.id = v.id';

function randomId() {
  return 1 + Math.floor(Math.random() * WORLD_ROWS);
}

// The row count asked for in `name`: missing, empty, not a number or < 1 -> 1; > 500 -> 500.
function count(query, name) {
  for (const pair of query.split('&')) {
    const eq = pair.indexOf('=');
    if (eq < 0 || pair.slice(0, eq) !== name) continue;
    const v = pair.slice(eq + 1);
    if (!/^[+-]?\d+$/.test(v)) return 1;
    const n = Number(v);
    return n > MAX_QUERIES ? MAX_QUERIES : n < 1 ? 1 : n;
  }
  return 1;
}

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

// The fortunes page: a small template whose every value goes through escapeHtml.
function fortunesPage(fortunes) {
  let rows = '';
  for (const f of fortunes) {
    rows += `<tr><td>${escapeHtml(f.id)}</td><td>${escapeHtml(f.message)}</td></tr>`;
  }
  return '<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>' +
    `<tr><th>id</th><th>message</th></tr>${rows}</table></body></html>`;
}

function send(res, status, type, body) {
  res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

function sendJson(res, value) {
  send(res, 200, 'application/json', JSON.stringify(value));
}

function fail(res, status, err) {
  send(res, status, 'application/json', JSON.stringify({ error: String(err && err.message || err) }));
}

function toWorld(row) {
  return { id: row.id, randomNumber: row.randomnumber };
}

function create(url, poolSize) {
  if (!url) {
    return {
      handles: (path) => PATHS.has(path),
      serve: (_path, _query, res) => fail(res, 503, 'DATABASE_URL is not set'),
    };
  }
  const pool = new Pool({ connectionString: url, max: Math.max(1, poolSize || 1) });
  // An idle connection that dies (server restart) must not kill the process.
  pool.on('error', () => {});

  const world = (id) =>
    pool.query({ name: 'world', text: SELECT_WORLD, values: [id] }).then((r) => {
      if (r.rows.length === 0) throw new Error(`no world row ${id}`);
      return toWorld(r.rows[0]);
    });
  const worlds = (n) => {
    const all = new Array(n);
    for (let i = 0; i < n; i++) all[i] = world(randomId());
    return Promise.all(all);
  };

  // The World table for /cached-queries, loaded by this process on first use
  // (concurrent first requests share the one load; a failed load is retried).
  let cache = null;
  let loading = null;
  const cached = () => {
    if (cache) return Promise.resolve(cache);
    if (!loading) {
      loading = pool.query({ name: 'world-all', text: SELECT_ALL }).then((r) => {
        const table = new Array(WORLD_ROWS + 1);
        for (const row of r.rows) table[row.id] = toWorld(row);
        cache = table;
        return table;
      }).finally(() => { loading = null; });
    }
    return loading;
  };

  const handlers = {
    '/db': (_q, res) => world(randomId()).then((w) => sendJson(res, w)),
    '/queries': (q, res) => worlds(count(q, 'queries')).then((ws) => sendJson(res, ws)),
    '/updates': async (q, res) => {
      const ws = await worlds(count(q, 'queries'));
      // New numbers; a row drawn twice keeps its last number in the answer
      // and in the table, which gets each id once, ids sorted (no deadlocks
      // between concurrent batches).
      const latest = new Map();
      for (const w of ws) {
        w.randomNumber = randomId();
        latest.set(w.id, w);
      }
      const ids = [...latest.keys()].sort((a, b) => a - b);
      const numbers = ids.map((id) => latest.get(id).randomNumber);
      for (const w of ws) w.randomNumber = latest.get(w.id).randomNumber;
      await pool.query({ name: 'world-update', text: UPDATE_WORLDS, values: [ids, numbers] });
      sendJson(res, ws);
    },
    '/cached-queries': (q, res) => cached().then((table) => {
      const n = count(q, 'count');
      const out = new Array(n);
      for (let i = 0; i < n; i++) out[i] = table[randomId()];
      sendJson(res, out);
    }),
    '/fortunes': (_q, res) => pool.query({ name: 'fortunes', text: SELECT_FORTUNES }).then((r) => {
      const fortunes = r.rows.map((row) => ({ id: row.id, message: row.message }));
      fortunes.push({ id: 0, message: 'Additional fortune added at request time.' });
      fortunes.sort((a, b) => (a.message < b.message ? -1 : a.message > b.message ? 1 : 0));
      send(res, 200, 'text/html; charset=utf-8', fortunesPage(fortunes));
    }),
    '/r5': async (_q, res) => {
      const first = await world(randomId());
      const second = await world(randomId());
      const top = await pool.query({ name: 'world-top', text: SELECT_TOP });
      sendJson(res, { first, second, top: top.rows.map(toWorld) });
    },
  };

  return {
    handles: (path) => PATHS.has(path),
    serve: (path, query, res) => {
      Promise.resolve()
        .then(() => handlers[path](query, res))
        .catch((err) => {
          if (!res.headersSent) fail(res, 500, err);
        });
    },
  };
}

module.exports = { create, count, escapeHtml };
