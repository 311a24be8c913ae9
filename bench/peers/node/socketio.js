// The Socket.IO peer of the cluster lab (issue 17): socket.io 4.8 with
// @socket.io/redis-adapter (on ioredis), so that instances on one Redis share rooms.
// Every client joins the room "chat"; an event "m" from any client is emitted to the whole
// room on every instance.
//
//   node socketio.js PORT REDIS_URL
//
// Clients speak Engine.IO 4 over WebSocket: /socket.io/?EIO=4&transport=websocket.
const { Server } = require("socket.io");
const { createAdapter } = require("@socket.io/redis-adapter");
const Redis = require("ioredis");

const port = Number(process.argv[2] || 3000);
const redisUrl = process.argv[3] || "redis://127.0.0.1:6379";

const pub = new Redis(redisUrl);
const sub = pub.duplicate();
const http = require("http").createServer();
const io = new Server(http, {
  transports: ["websocket"],
  serveClient: false,
  perMessageDeflate: false,
});
io.adapter(createAdapter(pub, sub));
io.on("connection", (socket) => {
  socket.join("chat");
  socket.on("m", (data) => io.to("chat").emit("m", data));
});
http.listen(port, "127.0.0.1", () =>
  console.log(`socket.io on 127.0.0.1:${port}, redis ${redisUrl}`),
);
