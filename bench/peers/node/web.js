// The web application routes of the Node.js peer (reports R2 and R4), doing the demo's jobs
// with the demo's data: /tpl/vars, /tpl/table, /tpl/page rendered by ejs (templates compiled
// once at start, output HTML-escaped), /blocks?n=1..45 (cached JSON blocks merged as text),
// /view (an HTML string).
'use strict';
const ejs = require('ejs');

const templates = {
  vars: ejs.compile(`<!DOCTYPE html>
<html><head><title><%= title %></title></head>
<body><h1><%= title %></h1><p>Hello, <%= name %>. You have <%= count %> new messages.</p></body></html>
`),
  table: ejs.compile(`<!DOCTYPE html>
<html><head><title><%= title %></title></head>
<body><table>
<tr><th>id</th><th>name</th><th>value</th></tr>
<% for (const row of rows) { %><tr><td><%= row.id %></td><td><%= row.name %></td><td><%= row.value %></td></tr>
<% } %></table></body></html>
`),
  page: ejs.compile(`<!DOCTYPE html>
<html><head><title><%= site %>: <%= heading %></title></head>
<body>
<header><a href="/"><%= site %></a> <span class="user"><%= user %></span></header>
<nav><ul>
<% for (const link of nav) { %><li><a href="<%= link.href %>"><%= link.label %></a></li>
<% } %></ul></nav>
<main><h1><%= heading %></h1>
<% for (const article of articles) { %><article><h2><a href="/articles/<%= article.id %>"><%= article.title %></a></h2>
<p class="meta"><%= article.author %>, <%= article.date %></p>
<p><%= article.summary %> <a href="/articles/<%= article.id %>">Read more</a></p></article>
<% } %></main>
<aside class="tags"><% for (const tag of tags) { %><a href="/tags/<%= tag.name %>" class="w<%= tag.weight %>"><%= tag.name %></a> <% } %></aside>
<footer>&copy; <%= year %> <%= site %></footer>
</body></html>
`),
};

const range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => a + i);
const data = {
  vars: { title: 'Brisk', name: 'Ada <admin>', count: 42 },
  table: {
    title: '1,000 rows',
    rows: range(1, 1000).map((id) => ({ id, name: `row <${id}> & co`, value: (id * 7) % 1000 })),
  },
  page: {
    site: 'Brisk News',
    heading: 'Latest articles',
    user: 'ada',
    nav: range(1, 12).map((i) => ({ href: `/section/${i}`, label: `Section ${i}` })),
    articles: range(1, 10).map((id) => ({
      id,
      title: `Article ${id}: "servers" & <sockets>`,
      author: `Author ${(id % 4) + 1}`,
      date: `2026-11-${String(id + 1).padStart(2, '0')}`,
      summary: 'A long-running server keeps its state in memory between requests, so the work of starting up is paid once.',
    })),
    tags: range(1, 30).map((i) => ({ name: `tag${i}`, weight: (i % 5) + 1 })),
    year: 2026,
  },
};

const blocks = range(1, 45).map((i) => JSON.stringify({
  id: i,
  title: `Block ${i}`,
  updated: '2026-11-23T12:00:00Z',
  items: range(1, 5).map((j) => ({
    title: `Story ${j} of block ${i}`,
    href: `/blocks/${i}/stories/${j}`,
    summary: `A short summary of story ${j}, the kind a side box shows.`,
  })),
}));

const VIEW = '<!DOCTYPE html><html><head><title>Brisk</title></head><body><h1>Hello from a view</h1><p>This page is a string.</p></body></html>';

function send(res, status, type, body) {
  res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

// Answers `url` (path without query) if it is one of these routes; returns whether it did.
exports.serve = (url, query, res) => {
  if (url.startsWith('/tpl/')) {
    const job = url.slice(5);
    if (!templates[job]) return false;
    send(res, 200, 'text/html; charset=utf-8', templates[job](data[job]));
    return true;
  }
  if (url === '/view') {
    send(res, 200, 'text/html; charset=utf-8', VIEW);
    return true;
  }
  if (url === '/blocks') {
    const m = /(?:^|&)n=([^&]*)/.exec(query);
    const n = m ? Number(m[1]) : 5;
    if (!Number.isInteger(n) || n < 1 || n > 45) {
      send(res, 400, 'application/json', JSON.stringify({ error: 'n: a number of blocks from 1 to 45' }));
    } else {
      send(res, 200, 'application/json', `{"n":${n},"blocks":[${blocks.slice(0, n).join(',')}]}`);
    }
    return true;
  }
  return false;
};
