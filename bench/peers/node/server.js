// Node.js peer: http + ws. GET / (Hello World), /json, /static/FILE from
// STATIC_DIR, /ws echo, /chat broadcast room (every message to every member
// of this process). PORT, WORKERS (cluster processes, default 1), STATIC_DIR.
// With DATABASE_URL (postgres://...): the database tests of db.js (/db,
// /queries, /fortunes, /updates, /cached-queries, /r5); DB_POOL connections
// per process (default 4). The web application routes of web.js: /tpl/vars, /tpl/table,
// /tpl/page (ejs), /blocks?n=N, /view.
'use strict';
const cluster = require('cluster');
const fs = require('fs');
const http = require('http');
const path = require('path');
const { WebSocketServer, WebSocket } = require('ws');
const db = require('./db');
const web = require('./web');

const port = Number(process.env.PORT || 8081);
const workers = Number(process.env.WORKERS || 1);
const staticDir = process.env.STATIC_DIR || '.';

if (cluster.isPrimary && workers > 1) {
  for (let i = 0; i < workers; i++) cluster.fork();
  const stop = () => {
    for (const id in cluster.workers) cluster.workers[id].kill('SIGTERM');
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
} else {
  const json = JSON.stringify({ message: 'Hello, World!' });
  const tests = db.create(process.env.DATABASE_URL, Number(process.env.DB_POOL || 4));
  const server = http.createServer((req, res) => {
    res.setHeader('Server', 'node');
    const q = req.url.indexOf('?');
    const url = q < 0 ? req.url : req.url.slice(0, q);
    if (tests.handles(url)) {
      tests.serve(url, q < 0 ? '' : req.url.slice(q + 1), res);
    } else if (web.serve(url, q < 0 ? '' : req.url.slice(q + 1), res)) {
      // /tpl/*, /view, /blocks: web.js
    } else if (url === '/') {
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': 11 });
      res.end('Hello World');
    } else if (url === '/json') {
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(json) });
      res.end(json);
    } else if (url.startsWith('/static/')) {
      const file = path.join(staticDir, path.basename(decodeURIComponent(url.slice(8))));
      fs.stat(file, (err, st) => {
        if (err || !st.isFile()) {
          res.writeHead(404, { 'Content-Length': 0 });
          res.end();
          return;
        }
        res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': st.size });
        fs.createReadStream(file).pipe(res);
      });
    } else {
      res.writeHead(404, { 'Content-Length': 0 });
      res.end();
    }
  });
  const echo = new WebSocketServer({ noServer: true, clientTracking: false, perMessageDeflate: false });
  const chat = new WebSocketServer({ noServer: true, clientTracking: true, perMessageDeflate: false });
  server.on('upgrade', (req, socket, head) => {
    const url = req.url.split('?')[0];
    if (url === '/ws') {
      echo.handleUpgrade(req, socket, head, (ws) => {
        ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
      });
    } else if (url === '/chat') {
      chat.handleUpgrade(req, socket, head, (ws) => {
        ws.on('message', (data, isBinary) => {
          for (const member of chat.clients) {
            if (member.readyState === WebSocket.OPEN) member.send(data, { binary: isBinary });
          }
        });
      });
    } else {
      socket.destroy();
    }
  });
  server.keepAliveTimeout = 65000;
  server.listen(port, '127.0.0.1');
  const stop = () => process.exit(0);
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
