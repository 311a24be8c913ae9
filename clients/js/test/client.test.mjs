// The client against a real Brisk: two demo instances on one Redis, started by
// crates/brisk-demo/tests/js_client.rs, which passes their URLs and the server API's key in
// BRISK_URLS and BRISK_API_KEY.
import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { Client } from "../dist/index.js";

const urls = (process.env.BRISK_URLS ?? "").split(",").filter(Boolean);
const apiKey = process.env.BRISK_API_KEY;
if (urls.length < 2 || !apiKey) {
  throw new Error("run through `cargo test -p brisk-demo --test js_client` (BRISK_URLS, BRISK_API_KEY)");
}
const [httpA, httpB] = urls;
const wsUrl = (http) => http.replace("http://", "ws://") + "/connection/websocket";

async function tokenFor(http, user, ttl) {
  const r = await fetch(`${http}/connection/token?user=${user}${ttl ? `&ttl=${ttl}` : ""}`);
  assert.equal(r.status, 200);
  return (await r.json()).token;
}

async function api(http, method, body) {
  const r = await fetch(`${http}/api/channels/${method}`, {
    method: "POST",
    headers: { authorization: `apikey ${apiKey}` },
    body: JSON.stringify(body),
  });
  const json = await r.json();
  assert.equal(r.status, 200, JSON.stringify(json));
  return json.result;
}

/** Resolves with the first event `name` of `emitter` that `pred` accepts. */
function next(emitter, name, pred = () => true, ms = 10000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`no ${name} event in ${ms} ms`));
    }, ms);
    const off = emitter.on(name, (e) => {
      if (!pred(e)) return;
      clearTimeout(timer);
      off();
      resolve(e);
    });
  });
}

async function until(what, probe, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await probe()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function client(http, user, options = {}) {
  return new Client(options.url ?? wsUrl(http), {
    getToken: () => tokenFor(http, user, options.ttl),
    minReconnectDelay: 100,
    maxReconnectDelay: 1000,
    timeout: 2000,
    ...options,
  });
}

test("a publication through the server API reaches subscribers on both instances once", async () => {
  const a = client(httpA, "ann");
  const b = client(httpB, "ben");
  const got = { ann: [], ben: [] };
  for (const [c, name] of [[a, "ann"], [b, "ben"]]) {
    c.subscribe("news:node").on("publication", (p) => got[name].push(p.data));
    c.connect();
    await next(c.subscription("news:node"), "subscribed");
  }
  await until("both subscribers counted", async () =>
    (await api(httpA, "channels", {})).channels["news:node"]?.clients === 2);
  for (let i = 0; i < 5; i++) await api(i % 2 ? httpA : httpB, "publish", { channel: "news:node", data: i });
  await until("five publications each", () => got.ann.length >= 5 && got.ben.length >= 5);
  // In offset order, whichever worker or instance each went through.
  assert.deepEqual(got.ann, [0, 1, 2, 3, 4]);
  assert.deepEqual(got.ben, [0, 1, 2, 3, 4]);
  a.disconnect();
  b.disconnect();
});

test("a bad token ends the connection without reconnecting", async () => {
  const c = new Client(wsUrl(httpA), { getToken: () => "not.a.token", minReconnectDelay: 50 });
  c.connect();
  const gone = await next(c, "disconnected");
  assert.equal(gone.code, 4001);
  assert.equal(gone.reconnect, false);
  assert.equal(c.state, "disconnected");
});

test("presence, join and leave, and publishing from the client", async () => {
  const a = client(httpA, "cleo");
  const b = client(httpB, "dan");
  const room = a.subscribe("chat:node-presence");
  a.connect();
  await next(room, "subscribed");
  const joined = next(room, "join", (e) => e.user === "dan");
  const danRoom = b.subscribe("chat:node-presence");
  b.connect();
  await next(danRoom, "subscribed");
  await joined;
  await until("presence to list both", async () =>
    JSON.stringify((await room.presence()).users) === JSON.stringify(["cleo", "dan"]));
  const heard = next(room, "publication", (p) => p.data?.text === "hello");
  const { offset } = await danRoom.publish({ text: "hello" });
  assert.match(offset, /^\d+:\d+$/);
  assert.equal((await heard).offset, offset);
  const left = next(room, "leave", (e) => e.user === "dan");
  b.disconnect();
  await left;
  a.disconnect();
});

/** A TCP proxy to `port` that can cut every connection and refuse new ones for a while. */
function proxy(port) {
  const sockets = new Set();
  let down = false;
  const server = net.createServer((inbound) => {
    if (down) return inbound.destroy();
    const outbound = net.connect(port, "127.0.0.1");
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {});
    }
    inbound.pipe(outbound).pipe(inbound);
    inbound.on("close", () => outbound.destroy());
    outbound.on("close", () => inbound.destroy());
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({
        port: server.address().port,
        cut() {
          down = true;
          for (const s of sockets) s.destroy();
        },
        restore() {
          down = false;
        },
        close() {
          server.close();
          for (const s of sockets) s.destroy();
        },
      }),
    ),
  );
}

test("a client cut off for 5 s recovers every publication it missed, in order", async () => {
  const port = Number(new URL(httpA).port);
  const p = await proxy(port);
  const c = client(httpA, "eve", { url: `ws://127.0.0.1:${p.port}/connection/websocket` });
  const got = [];
  const room = c.subscribe("chat:node-recovery");
  room.on("publication", (pub) => got.push(pub.data));
  c.connect();
  await next(room, "subscribed");
  // Publications from B reach A's subscribers once A's subscription is known across instances.
  await until("the subscriber counted", async () =>
    (await api(httpB, "channels", {})).channels["chat:node-recovery"]?.clients === 1);
  await api(httpB, "publish", { channel: "chat:node-recovery", data: "before" });
  await until("the first publication", () => got.length === 1);
  const lost = next(c, "disconnected");
  p.cut();
  assert.equal((await lost).reconnect, true);
  for (let i = 0; i < 10; i++) await api(httpB, "publish", { channel: "chat:node-recovery", data: i });
  await new Promise((r) => setTimeout(r, 5000)); // the outage itself: 5 s without a server
  const back = next(room, "subscribed");
  p.restore();
  const again = await back;
  assert.equal(again.recovered, true);
  await until("every missed publication", () => got.length === 11);
  assert.deepEqual(got, ["before", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  c.disconnect();
  p.close();
});

test("a recovery larger than one page of the history arrives whole, over WebSocket and SSE", async () => {
  // 20 publications of 20 KB: more than the history's 256 KiB page, so both clients get it
  // in pages (the socket asks for the next one, the event stream is sent each).
  const port = Number(new URL(httpA).port);
  const p = await proxy(port);
  const ws = client(httpA, "paige", { url: `ws://127.0.0.1:${p.port}/connection/websocket` });
  const sse = client(httpA, "stu", {
    url: "ws://127.0.0.1:1/connection/websocket",
    sseUrl: `http://127.0.0.1:${p.port}/connection/sse`,
    fallbackAfter: 1,
  });
  const got = { ws: [], sse: [] };
  for (const [c, name] of [[ws, "ws"], [sse, "sse"]]) {
    c.subscribe("news:node-pages").on("publication", (pub) => got[name].push(pub.data));
    c.connect();
    await next(c.subscription("news:node-pages"), "subscribed");
  }
  await until("both subscribers counted", async () =>
    (await api(httpB, "channels", {})).channels["news:node-pages"]?.clients === 2);
  await api(httpB, "publish", { channel: "news:node-pages", data: "first" });
  await until("the first on both", () => got.ws.length === 1 && got.sse.length === 1);
  const lost = Promise.all([next(ws, "disconnected"), next(sse, "disconnected")]);
  p.cut();
  await lost;
  const big = (i) => `${i}:`.padEnd(20000, "x");
  for (let i = 0; i < 20; i++) await api(httpB, "publish", { channel: "news:node-pages", data: big(i) });
  const back = [next(ws.subscription("news:node-pages"), "subscribed"), next(sse.subscription("news:node-pages"), "subscribed")];
  p.restore();
  for (const b of back) assert.equal((await b).recovered, true);
  await until("all twenty on both", () => got.ws.length === 21 && got.sse.length === 21, 20000);
  const want = ["first", ...Array.from({ length: 20 }, (_, i) => big(i))];
  assert.deepEqual(got.ws, want);
  assert.deepEqual(got.sse, want);
  ws.disconnect();
  sse.disconnect();
  p.close();
});

test("the msgpack format: bytes between MessagePack and JSON clients, and recovery", async () => {
  const port = Number(new URL(httpA).port);
  const p = await proxy(port);
  const m = client(httpA, "mia", {
    format: "msgpack",
    url: `ws://127.0.0.1:${p.port}/connection/websocket`,
  });
  const j = client(httpB, "joe");
  const got = { mia: [], joe: [] };
  for (const [c, name] of [[m, "mia"], [j, "joe"]]) {
    c.subscribe("chat:node-bin").on("publication", (pub) => got[name].push(pub.data));
    c.connect();
    await next(c.subscription("chat:node-bin"), "subscribed");
  }
  await until("both subscribers counted", async () =>
    (await api(httpA, "channels", {})).channels["chat:node-bin"]?.clients === 2);
  const { offset } = await m.publish("chat:node-bin", new Uint8Array([0, 255, 1]));
  assert.match(offset, /^\d+:\d+$/);
  await j.publish("chat:node-bin", { n: 1 });
  await until("both publications on both", () => got.mia.length === 2 && got.joe.length === 2);
  const text = (bytes) => new TextDecoder().decode(bytes);
  // The MessagePack client gets bytes; the JSON client gets JSON, and bytes from base64.
  assert.deepEqual(got.mia[0], new Uint8Array([0, 255, 1]));
  assert.equal(text(got.mia[1]), '{"n":1}');
  assert.deepEqual(got.joe[0], new Uint8Array([0, 255, 1]));
  assert.deepEqual(got.joe[1], { n: 1 });
  // A JSON value published by the MessagePack client reaches the JSON one as JSON.
  await m.publish("chat:node-bin", { from: "mia" });
  await until("the third", () => got.joe.length === 3 && got.mia.length === 3);
  assert.deepEqual(got.joe[2], { from: "mia" });
  // Presence and history over MessagePack.
  assert.deepEqual((await m.presence("chat:node-bin")).users, ["joe", "mia"]);
  const h = await m.history("chat:node-bin", 3);
  assert.deepEqual(h.publications[0].data, new Uint8Array([0, 255, 1]));
  // Cut off: what was published meanwhile (bytes through the API too) comes back in order.
  const lost = next(m, "disconnected");
  p.cut();
  await lost;
  await api(httpB, "publish", { channel: "chat:node-bin", b64: "AQID" });
  await j.publish("chat:node-bin", "while away");
  const back = next(m.subscription("chat:node-bin"), "subscribed");
  p.restore();
  assert.equal((await back).recovered, true);
  await until("the missed two", () => got.mia.length === 5);
  assert.deepEqual(got.mia[3], new Uint8Array([1, 2, 3]));
  assert.equal(text(got.mia[4]), '"while away"');
  // Bytes need the binary format.
  await assert.rejects(j.publish("chat:node-bin", new Uint8Array([1])), /msgpack/);
  m.disconnect();
  j.disconnect();
  p.close();
});

test("over server-sent events when WebSocket cannot connect: in order, recovered, listening only", async () => {
  const port = Number(new URL(httpA).port);
  const p = await proxy(port);
  // Nothing listens on port 1: every WebSocket open fails, and the client turns to SSE.
  const c = client(httpA, "sid", {
    url: "ws://127.0.0.1:1/connection/websocket",
    sseUrl: `http://127.0.0.1:${p.port}/connection/sse`,
    fallbackAfter: 2,
  });
  const got = { news: [], chat: [] };
  const turned = next(c, "transport");
  const news = c.subscribe("news:node-sse");
  news.on("publication", (pub) => got.news.push(pub.data));
  c.connect();
  assert.equal((await turned).transport, "sse");
  await next(news, "subscribed");
  assert.equal(c.state, "connected");
  await until("the stream counted", async () =>
    (await api(httpB, "channels", {})).channels["news:node-sse"]?.clients === 1);
  await api(httpB, "publish", { channel: "news:node-sse", data: 0 });
  await api(httpA, "publish", { channel: "news:node-sse", data: 1 });
  await until("two publications", () => got.news.length === 2);
  // Commands are not there: said so.
  await assert.rejects(c.publish("news:node-sse", 2), (e) => e.code === 108 && /server-sent/.test(e.message));
  // A second channel opens the stream again: the first loses nothing and gets nothing twice.
  const chat = c.subscribe("chat:node-sse");
  chat.on("publication", (pub) => got.chat.push(pub.data));
  await next(chat, "subscribed");
  await api(httpB, "publish", { channel: "news:node-sse", data: 2 });
  await api(httpB, "publish", { channel: "chat:node-sse", data: "c0" });
  await until("both channels", () => got.news.length === 3 && got.chat.length === 1);
  // A channel the token does not allow is refused alone; the others go on.
  const denied = next(c.subscribe("private:someone-else"), "unsubscribed");
  assert.equal((await denied).code, 103);
  // Cut off: what passed meanwhile is recovered, in order, once.
  const lost = next(c, "disconnected");
  p.cut();
  assert.equal((await lost).reconnect, true);
  for (let i = 3; i < 6; i++) await api(httpB, "publish", { channel: "news:node-sse", data: i });
  const back = next(news, "subscribed");
  p.restore();
  assert.equal((await back).recovered, true);
  await until("the missed three", () => got.news.length === 6);
  assert.deepEqual(got.news, [0, 1, 2, 3, 4, 5]);
  assert.deepEqual(got.chat, ["c0"]);
  // The server API's disconnect ends it for good (4003), as it closes a socket.
  const ended = next(c, "disconnected");
  await api(httpA, "disconnect", { user: "sid" });
  const e = await ended;
  assert.deepEqual([e.code, e.reconnect], [4003, false]);
  c.disconnect();
  p.close();
});

test("the token is refreshed before it expires", async () => {
  const c = client(httpA, "finn", { ttl: 6 });
  const closed = [];
  c.on("disconnected", (e) => closed.push(e.code));
  c.connect();
  const first = await next(c, "connected");
  await until("past the first token's expiry", () => Date.now() / 1000 > first.expires + 1, 8000);
  assert.deepEqual(closed, []);
  assert.equal(c.state, "connected");
  c.disconnect();
});

test("a subscription token is refreshed before it expires", async () => {
  const c = client(httpA, "gus");
  c.connect();
  await next(c, "connected");
  const asked = [];
  const sub = c.subscribe("private:vault", {
    getToken: async () => {
      asked.push(Date.now());
      const r = await fetch(`${httpA}/connection/token?user=gus&channel=private:vault&ttl=4`);
      assert.equal(r.status, 200);
      return (await r.json()).token;
    },
  });
  const ended = [];
  sub.on("unsubscribed", (e) => ended.push(e));
  await next(sub, "subscribed");
  // A subscription the server ended would subscribe again: none may happen.
  let again = 0;
  sub.on("subscribed", () => again++);
  // Tokens of 4 s: past the first one's expiry, after two refreshes, still subscribed.
  await until("two refreshes", () => asked.length >= 3, 20000);
  assert.deepEqual(ended, []);
  assert.equal(again, 0);
  assert.equal(sub.state, "subscribed");
  const got = next(sub, "publication");
  await api(httpA, "publish", { channel: "private:vault", data: "kept" });
  assert.equal((await got).data, "kept");
  c.disconnect();
});
