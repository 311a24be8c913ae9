/**
 * The client of Brisk's channel protocol (version 1): connect with a token, subscribe to
 * channels, get their publications in order, recover what was missed while disconnected,
 * presence, publish. No runtime dependencies: it runs on the platform's `WebSocket`
 * (browsers; Node 22, or Node 20 with `--experimental-websocket`).
 *
 * ```ts
 * import { Client } from "@brisk/channels";
 * const client = new Client("wss://example.com/connection/websocket", {
 *   getToken: async () => (await (await fetch("/token")).json()).token,
 * });
 * const lobby = client.subscribe("chat:lobby");
 * lobby.on("publication", (p) => console.log(p.data));
 * client.connect();
 * ```
 *
 * With `format: "msgpack"` it speaks the protocol's binary format (MessagePack): publications'
 * data is then always a `Uint8Array` of the bytes as published. With `sseUrl`, a client whose
 * WebSocket cannot connect (a proxy that refuses upgrades) listens over server-sent events.
 *
 * The protocol is described in Brisk's guide, chapter "Channels".
 */

import { decode, encode } from "./msgpack.js";

/** The protocol version this client speaks. */
export const PROTOCOL_VERSION = 1;

/** Close codes after which the client does not reconnect on its own. */
export const TERMINAL_CLOSE_CODES: readonly number[] = [4001, 4003, 4004];

/** The connection's state. */
export type State = "disconnected" | "connecting" | "connected";

/** A subscription's state. */
export type SubscriptionState = "subscribing" | "subscribed" | "unsubscribed";

/** A publication on a channel. */
export interface Publication {
  channel: string;
  /** JSON data as a value; bytes that are not JSON as a `Uint8Array` (with the `msgpack`
   * format: always a `Uint8Array`, JSON publications as their UTF-8 JSON text). */
  data: unknown;
  /** Its position, `epoch:offset`, when the channel keeps a history. */
  offset?: string;
}

/** A subscriber that came or went. */
export interface PresenceEvent {
  channel: string;
  user: string;
  client: string;
}

/** Who is subscribed to a channel. */
export interface Presence {
  clients: number;
  users: string[];
}

/** A channel's last publications. */
export interface History {
  position: string;
  publications: { offset: string; data: unknown }[];
}

/** A command the server refused (`code` as in the protocol), or one that could not be sent. */
export class ChannelError extends Error {
  /** The protocol's error code; 0 when the connection closed or the reply did not come. */
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.name = "ChannelError";
    this.code = code;
  }
}

/** How the client reaches the server: a WebSocket, or (listening only) server-sent events. */
export type Transport = "websocket" | "sse";

/** How the client's messages are encoded: JSON text, or MessagePack in binary messages. */
export type Format = "json" | "msgpack";

/** How the client connects. */
export interface ClientOptions {
  /** The protocol's format (default `"json"`); `"msgpack"` adds `format=msgpack` to the URL. */
  format?: Format;
  /** The server-sent events URL of the same channels (`Channels::event_stream`; the demo's
   * `/connection/sse`). With it, a client whose WebSocket fails to open `fallbackAfter` times
   * in a row listens over one event stream instead: publications in order, recovery, join
   * and leave, token renewal (the stream is opened again with a new token). Commands
   * (`publish`, `presence`, `history`) then fail with error 108; subscription tokens are not
   * sent (a channel that needs one is refused: `unsubscribed` with code 103). */
  sseUrl?: string;
  /** WebSocket opens that fail in a row before the client turns to `sseUrl` (default 2; 0:
   * server-sent events from the start). */
  fallbackAfter?: number;
  /** A connect token: called before each connect and before the token expires. */
  getToken: () => string | Promise<string>;
  /** The WebSocket constructor (default: the platform's). */
  WebSocket?: typeof WebSocket;
  /** The first reconnect's delay bound, in ms (default 500); doubled each time, with jitter. */
  minReconnectDelay?: number;
  /** The longest reconnect delay, in ms (default 20000). */
  maxReconnectDelay?: number;
  /** How long a command waits for its reply, in ms (default 10000). */
  timeout?: number;
  /** How long a publication that skipped an offset waits for the missing one before the
   * client asks the history for it, in ms (default 500). */
  gapTimeout?: number;
}

/** What a subscription is told. */
export interface SubscribeOptions {
  /** A subscription token, for channels whose namespace asks for one. */
  getToken?: () => string | Promise<string>;
}

type Listener<T> = (event: T) => void;

/** Named events; `on` answers a function that removes the listener. */
class Emitter<Events> {
  private listeners = new Map<keyof Events, Set<Listener<never>>>();

  on<K extends keyof Events>(name: K, listener: Listener<Events[K]>): () => void {
    let set = this.listeners.get(name);
    if (!set) {
      set = new Set();
      this.listeners.set(name, set);
    }
    set.add(listener as Listener<never>);
    return () => set!.delete(listener as Listener<never>);
  }

  protected emit<K extends keyof Events>(name: K, event: Events[K]): void {
    for (const listener of this.listeners.get(name) ?? []) {
      try {
        (listener as Listener<Events[K]>)(event);
      } catch (e) {
        // A listener's error must not stop the others, nor the client.
        setTimeout(() => {
          throw e;
        });
      }
    }
  }
}

/** The client's events. */
export interface ClientEvents {
  state: { state: State };
  connected: { client: string; user: string; expires: number | null };
  disconnected: { code: number; reason: string; reconnect: boolean };
  /** The client turned to server-sent events (WebSocket failed `fallbackAfter` times). */
  transport: { transport: Transport };
  error: { error: Error };
}

interface Pending {
  resolve: (result: any) => void;
  reject: (error: ChannelError) => void;
  timer: ReturnType<typeof setTimeout>;
}

/** A connection to a Brisk channel endpoint that reconnects by itself. */
export class Client extends Emitter<ClientEvents> {
  /** The connection's state. */
  state: State = "disconnected";
  /** This connection's id (after `connected`; none over server-sent events). */
  clientId?: string;
  /** How the client reaches the server now. */
  transport: Transport = "websocket";
  private ws?: WebSocket;
  /** The event stream's request, while it is open (server-sent events). */
  private stream?: AbortController;
  /** Over server-sent events with no subscription: no stream until one comes. */
  private idle = false;
  /** WebSocket opens that failed in a row. */
  private failedOpens = 0;
  private restreamTimer?: ReturnType<typeof setTimeout>;
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private subscriptions = new Map<string, Subscription>();
  private attempts = 0;
  private reconnectTimer?: ReturnType<typeof setTimeout>;
  private refreshTimer?: ReturnType<typeof setTimeout>;
  private stopped = true;
  private waiting: (() => void)[] = [];

  constructor(
    readonly url: string,
    private readonly options: ClientOptions,
  ) {
    super();
  }

  /** Connects, and reconnects after each loss until `disconnect`. */
  connect(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.attempts = 0;
    this.failedOpens = 0;
    if (this.options.sseUrl && this.options.fallbackAfter === 0) this.transport = "sse";
    void this.open();
  }

  /** Closes the connection, and does not reconnect. */
  disconnect(): void {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.refreshTimer);
    clearTimeout(this.restreamTimer);
    const ws = this.ws;
    this.ws = undefined;
    const stream = this.stream;
    this.stream = undefined;
    this.idle = false;
    this.lost(1000, "disconnect called", false);
    ws?.close(1000);
    stream?.abort();
  }

  /** Subscribes to `channel` (now, or once connected; again after each reconnect, recovering
   * what was missed). */
  subscribe(channel: string, options: SubscribeOptions = {}): Subscription {
    if (this.subscriptions.has(channel)) {
      throw new ChannelError(105, `${channel} is subscribed already`);
    }
    const sub = new Subscription(this, channel, options);
    this.subscriptions.set(channel, sub);
    if (this.transport === "sse") this.restream();
    else if (this.state === "connected") void sub.start();
    return sub;
  }

  /** The subscription to `channel`, if any. */
  subscription(channel: string): Subscription | undefined {
    return this.subscriptions.get(channel);
  }

  /** Publishes `data` to `channel` (where its namespace lets clients publish): any JSON
   * value, or with the `msgpack` format a `Uint8Array` of bytes too (other values go as their
   * JSON text, which JSON clients get as JSON). */
  async publish(channel: string, data: unknown): Promise<{ offset: string | null }> {
    await this.ready();
    if (this.format() === "msgpack") {
      const bytes = data instanceof Uint8Array ? data : utf8.encode(JSON.stringify(data));
      return this.call("publish", { channel, data: bytes });
    }
    if (data instanceof Uint8Array) {
      throw new ChannelError(104, 'bytes are published with the format "msgpack"');
    }
    return this.call("publish", { channel, data });
  }

  /** Who is subscribed to `channel` (a subscribed one whose namespace has presence). */
  async presence(channel: string): Promise<Presence> {
    await this.ready();
    return this.call("presence", { channel });
  }

  /** The last `limit` publications of `channel` (a subscribed one with history). */
  async history(channel: string, limit?: number): Promise<History> {
    await this.ready();
    const result = await this.call("history", { channel, limit });
    return {
      position: result.position,
      publications: result.publications.map((p: any) => ({ offset: p.offset, data: dataOf(p) })),
    };
  }

  /** @internal The format this client speaks. */
  format(): Format {
    return this.options.format ?? "json";
  }

  /** Resolves once connected (within the command timeout). */
  private ready(): Promise<void> {
    if (this.state === "connected") return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting = this.waiting.filter((w) => w !== done);
        reject(new ChannelError(0, "not connected"));
      }, this.timeout());
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      this.waiting.push(done);
    });
  }

  /** @internal Sends a command and resolves with its result. */
  call(name: string, body: object): Promise<any> {
    if (this.transport === "sse") {
      return Promise.reject(
        new ChannelError(108, `${name} is not available over server-sent events (listening only)`),
      );
    }
    const ws = this.ws;
    if (!ws || ws.readyState !== 1) {
      return Promise.reject(new ChannelError(0, "not connected"));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new ChannelError(0, `no reply to ${name} in time`));
      }, this.timeout());
      this.pending.set(id, { resolve, reject, timer });
      const command = { id, [name]: body };
      ws.send(this.format() === "msgpack" ? encode(command) : JSON.stringify(command));
    });
  }

  private timeout(): number {
    return this.options.timeout ?? 10000;
  }

  /** @internal */
  gapTimeout(): number {
    return this.options.gapTimeout ?? 500;
  }

  /** @internal */
  forget(channel: string): void {
    this.subscriptions.delete(channel);
    this.restream();
  }

  /** @internal Over server-sent events: opens the stream again (soon, once for many calls),
   * for the channels subscribed now, each recovering from its position. */
  restream(): void {
    if (this.transport !== "sse" || this.stopped || this.restreamTimer) return;
    if (!this.stream && !this.idle) return; // a reconnect is on its way, with every channel
    this.restreamTimer = setTimeout(() => {
      this.restreamTimer = undefined;
      const old = this.stream;
      this.stream = undefined;
      old?.abort();
      for (const sub of this.subscriptions.values()) sub.paused();
      void this.openStream();
    });
  }

  private setState(state: State): void {
    if (this.state !== state) {
      this.state = state;
      this.emit("state", { state });
    }
  }

  private async open(): Promise<void> {
    if (this.transport === "sse") return this.openStream();
    this.setState("connecting");
    const token = await this.token();
    if (token === undefined || this.stopped) return;
    const Socket = this.options.WebSocket ?? globalThis.WebSocket;
    const ws = new Socket(this.format() === "msgpack" ? withQuery(this.url, "format=msgpack") : this.url);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    let opened = false;
    const gone = (code: number, reason: string) => {
      clearTimeout(handshake);
      if (ws !== this.ws) return;
      this.ws = undefined;
      const terminal = TERMINAL_CLOSE_CODES.includes(code);
      if (!opened) this.failedOpens += 1;
      const fallBack =
        !terminal && !!this.options.sseUrl && this.failedOpens >= (this.options.fallbackAfter ?? 2);
      if (fallBack) {
        this.transport = "sse";
        this.emit("transport", { transport: "sse" });
      }
      this.lost(code, reason, !terminal);
      if (terminal) this.stopped = true;
      else this.reconnectLater();
    };
    // Some WebSocket implementations (Node 20's) report nothing when the server drops the
    // connection before the handshake: give up on it after the command timeout.
    const handshake = setTimeout(() => {
      gone(1006, "no connect reply in time");
      ws.close();
    }, this.timeout());
    ws.onopen = () => {
      opened = true;
      this.failedOpens = 0;
      this.call("connect", { token }).then(
        (result) => {
          clearTimeout(handshake);
          this.connected(result);
        },
        (e: ChannelError) => {
          this.emit("error", { error: e });
          ws.close(1000);
        },
      );
    };
    ws.onmessage = (e: MessageEvent) => {
      if (ws === this.ws) this.received(e.data);
    };
    ws.onclose = (e: CloseEvent) => gone(e.code, e.reason);
    ws.onerror = () => {
      // A close event follows.
    };
  }

  private connected(result: { client: string; user: string; expires: number | null }): void {
    this.attempts = 0;
    this.clientId = result.client;
    this.setState("connected");
    this.emit("connected", result);
    this.refreshBefore(result.expires);
    for (const done of this.waiting.splice(0)) done();
    // Over server-sent events the stream subscribed them already.
    if (this.transport === "websocket") {
      for (const sub of this.subscriptions.values()) void sub.start();
    }
  }

  /** A connect token from the getter; `undefined` (a reconnect planned) when it failed. */
  private async token(): Promise<string | undefined> {
    try {
      return await this.options.getToken();
    } catch (e) {
      this.emit("error", { error: asError(e) });
      this.reconnectLater();
      return undefined;
    }
  }

  /** Opens an event stream of every subscribed channel (server-sent events). */
  private async openStream(): Promise<void> {
    if (this.state !== "connected") this.setState("connecting");
    const token = await this.token();
    if (token === undefined || this.stopped || this.stream || this.restreamTimer) return;
    const subs = [...this.subscriptions.values()].filter((s) => s.state !== "unsubscribed");
    this.idle = subs.length === 0;
    if (this.idle) return; // opened when a channel is subscribed
    const query = subs
      .map((s) => {
        const since = s.position ? `&since=${encodeURIComponent(`${s.channel},${s.position}`)}` : "";
        return `channel=${encodeURIComponent(s.channel)}${since}`;
      })
      .join("&");
    const ctrl = new AbortController();
    this.stream = ctrl;
    const gone = (code: number, reason: string) => {
      if (this.stream !== ctrl) return;
      this.stream = undefined;
      ctrl.abort();
      const terminal = TERMINAL_CLOSE_CODES.includes(code);
      this.lost(code, reason, !terminal);
      if (terminal) this.stopped = true;
      else this.reconnectLater();
    };
    const head = setTimeout(() => gone(1006, "the event stream did not answer in time"), this.timeout());
    let response: Response;
    try {
      response = await fetch(withQuery(this.options.sseUrl!, query), {
        headers: { authorization: `Bearer ${token}`, accept: "text/event-stream" },
        signal: ctrl.signal,
        cache: "no-store",
      });
    } catch (e) {
      clearTimeout(head);
      return gone(1006, `the event stream failed: ${asError(e).message}`);
    } finally {
      clearTimeout(head);
    }
    if (this.stream !== ctrl) return;
    if (!response.ok) {
      const error = ((await response.json().catch(() => ({}))) as any).error ?? {};
      const refused = typeof error.channel === "string" && this.subscriptions.get(error.channel);
      if (refused && (response.status === 403 || response.status === 400)) {
        // One channel refused: drop it, ask again for the others.
        this.stream = undefined;
        refused.refused(new ChannelError(error.code ?? 103, error.message ?? "refused"));
        void this.openStream();
        return;
      }
      const code = response.status === 401 && typeof error.code === "number" ? error.code : 1006;
      return gone(code, error.message ?? `the event stream answered ${response.status}`);
    }
    try {
      await readEvents(response.body!, (name, data) => {
        if (this.stream !== ctrl) return;
        if (name === "close") {
          const close = JSON.parse(data);
          return gone(close.code, close.reason);
        }
        this.streamed(data);
      });
    } catch (e) {
      return gone(1006, `the event stream failed: ${asError(e).message}`);
    }
    gone(1006, "the event stream ended");
  }

  /** One event of the stream: `connected`, a channel's `subscribed`, or a push. */
  private streamed(data: string): void {
    let message: any;
    try {
      message = JSON.parse(data);
    } catch (e) {
      this.emit("error", { error: new Error(`not JSON: ${asError(e).message}`) });
      return;
    }
    if (message.connected) {
      const { user, expires } = message.connected;
      this.attempts = 0;
      if (this.state === "connected") this.refreshBefore(expires);
      else this.connected({ client: "", user, expires });
    } else if (message.subscribed) {
      this.subscriptions.get(message.channel)?.subscribedWith(message.subscribed);
    } else if (message.publications) {
      // A further page of what the stream recovered.
      this.subscriptions.get(message.channel)?.acceptAll(message.publications);
    } else {
      this.pushed(message);
    }
  }

  /** Sends `refresh` with a new token before the current one expires. */
  private refreshBefore(expires: number | null): void {
    clearTimeout(this.refreshTimer);
    if (expires == null) return;
    this.refreshTimer = setTimeout(async () => {
      // An event stream is opened again, with a new token.
      if (this.transport === "sse") return this.restream();
      try {
        const token = await this.options.getToken();
        const result = await this.call("refresh", { token });
        this.refreshBefore(result.expires);
      } catch (e) {
        // The server closes with 4002 when the token expires; the reconnect gets a new one.
        this.emit("error", { error: asError(e) });
      }
    }, refreshDelay(expires));
  }

  private received(data: unknown): void {
    let message: any;
    try {
      if (this.format() === "msgpack") {
        if (!(data instanceof ArrayBuffer)) throw new Error("a text message");
        message = decode(new Uint8Array(data));
      } else {
        message = JSON.parse(String(data));
      }
    } catch (e) {
      const what = this.format() === "msgpack" ? "MessagePack" : "JSON";
      this.emit("error", { error: new Error(`not ${what}: ${asError(e).message}`) });
      return;
    }
    if (typeof message.id === "number") {
      const pending = this.pending.get(message.id);
      if (!pending) return;
      this.pending.delete(message.id);
      clearTimeout(pending.timer);
      if (message.error) {
        pending.reject(new ChannelError(message.error.code, message.error.message));
      } else {
        pending.resolve(message.result);
      }
      return;
    }
    this.pushed(message);
  }

  /** A push: a publication, a join or leave, or the end of a subscription. */
  private pushed(message: any): void {
    const sub = this.subscriptions.get(message.channel);
    if (!sub) return;
    if (message.pub) {
      sub.accept({ channel: message.channel, data: dataOf(message.pub), offset: message.pub.offset });
    } else if (message.join) {
      sub.presenceChanged("join", { channel: message.channel, ...message.join });
    } else if (message.leave) {
      sub.presenceChanged("leave", { channel: message.channel, ...message.leave });
    } else if (message.unsubscribe) {
      sub.ended(message.unsubscribe.code, message.unsubscribe.reason);
    }
  }

  private lost(code: number, reason: string, reconnect: boolean): void {
    clearTimeout(this.refreshTimer);
    for (const [id, pending] of this.pending) {
      clearTimeout(pending.timer);
      pending.reject(new ChannelError(0, "the connection closed"));
      this.pending.delete(id);
    }
    for (const sub of this.subscriptions.values()) sub.paused();
    if (this.state !== "disconnected") {
      this.setState("disconnected");
      this.emit("disconnected", { code, reason, reconnect });
    }
  }

  private reconnectLater(): void {
    if (this.stopped) return;
    const min = this.options.minReconnectDelay ?? 500;
    const max = this.options.maxReconnectDelay ?? 20000;
    const bound = Math.min(max, min * 2 ** this.attempts);
    this.attempts += 1;
    // Full jitter: clients that lost their server at once do not come back at once.
    const delay = min / 2 + Math.random() * (bound - min / 2);
    this.reconnectTimer = setTimeout(() => void this.open(), delay);
  }
}

/** A subscription's events. */
export interface SubscriptionEvents {
  subscribed: { channel: string; position?: string; recovered?: boolean; reason?: string };
  publication: Publication;
  join: PresenceEvent;
  leave: PresenceEvent;
  error: { error: ChannelError };
  /** The subscription ended: asked for, refused, or ended by the server (with its `code`
   * and `reason`; a subscription whose token expired subscribes again by itself when it has
   * a `getToken`). */
  unsubscribed: { channel: string; code?: number; reason?: string };
}

/** A channel subscribed through a [`Client`]: its publications arrive in offset order, each
 * once, across reconnects. */
export class Subscription extends Emitter<SubscriptionEvents> {
  /** The subscription's state. */
  state: SubscriptionState = "subscribing";
  /** How far the subscription has come (`epoch:offset`), with history: the last publication
   * delivered, or the channel's position when it subscribed. */
  position?: string;
  /** Publications that came while subscribing, delivered after the reply. */
  private early: Publication[] = [];
  /** Publications past a gap, by offset, waiting for the missing ones. */
  private held = new Map<number, Publication>();
  private gapTimer?: ReturnType<typeof setTimeout>;
  private retryTimer?: ReturnType<typeof setTimeout>;
  /** Sends a new subscription token before the one in use expires. */
  private refreshTimer?: ReturnType<typeof setTimeout>;
  /** Counts subscribe attempts: the reply to an older one is ignored. */
  private attempt = 0;

  constructor(
    private readonly client: Client,
    readonly channel: string,
    private readonly options: SubscribeOptions,
  ) {
    super();
  }

  /** Publishes `data` to this channel. */
  publish(data: unknown): Promise<{ offset: string | null }> {
    return this.client.publish(this.channel, data);
  }

  /** Who is subscribed to this channel. */
  presence(): Promise<Presence> {
    return this.client.presence(this.channel);
  }

  /** This channel's last `limit` publications. */
  history(limit?: number): Promise<History> {
    return this.client.history(this.channel, limit);
  }

  /** Stops the subscription. */
  async unsubscribe(): Promise<void> {
    const was = this.state;
    this.state = "unsubscribed";
    clearTimeout(this.gapTimer);
    clearTimeout(this.retryTimer);
    clearTimeout(this.refreshTimer);
    this.client.forget(this.channel);
    if (was === "subscribed") {
      await this.client.call("unsubscribe", { channel: this.channel }).catch(() => undefined);
    }
    this.emit("unsubscribed", { channel: this.channel });
  }

  /** @internal Subscribes on the current connection, recovering from `position`. */
  async start(): Promise<void> {
    if (this.state === "unsubscribed") return;
    if (this.client.transport === "sse") return this.client.restream();
    const attempt = ++this.attempt;
    clearTimeout(this.retryTimer);
    this.state = "subscribing";
    this.early = [];
    let result: any;
    try {
      const token = this.options.getToken ? await this.options.getToken() : undefined;
      result = await this.client.call("subscribe", {
        channel: this.channel,
        token,
        since: this.position,
      });
    } catch (e) {
      if (attempt !== this.attempt) return;
      const error = e instanceof ChannelError ? e : new ChannelError(0, String(e));
      if (error.code === 105) {
        // The server holds a subscription this client gave up on: drop it, then subscribe.
        await this.client.call("unsubscribe", { channel: this.channel }).catch(() => undefined);
        if (attempt === this.attempt) void this.start();
        return;
      }
      this.emit("error", { error });
      if (error.code === 100 || error.code === 0) {
        // The server could not now, or no answer in time, or `getToken` failed, on a
        // connection still up (a lost one pauses the subscription first): try again.
        this.retryTimer = setTimeout(() => void this.start(), 1000 + Math.random() * 1000);
      } else {
        // Refused (permission, unknown channel…): asking again would be refused again.
        this.end(error);
      }
      return;
    }
    if (attempt !== this.attempt) return;
    if ((this.state as SubscriptionState) === "unsubscribed") {
      // Unsubscribed while the reply was on its way.
      void this.client.call("unsubscribe", { channel: this.channel }).catch(() => undefined);
      return;
    }
    this.subscribedWith(result);
  }

  /** @internal The server refused the subscription (an event stream's 403 or 400). */
  refused(error: ChannelError): void {
    this.emit("error", { error });
    this.end(error);
  }

  private end(error: ChannelError): void {
    this.state = "unsubscribed";
    this.client.forget(this.channel);
    this.emit("unsubscribed", { channel: this.channel, code: error.code, reason: error.message });
  }

  /** @internal The subscription is on: `subscribe`'s result, or an event stream's
   * `subscribed` event (the position, and what recovery found). */
  subscribedWith(result: any): void {
    if (this.state === "unsubscribed") return;
    if (result.recovered === false || this.position === undefined) {
      // Nothing to recover from (or it was lost): go on from the channel's position.
      this.position = result.position;
      this.held.clear();
    }
    this.state = "subscribed";
    this.refreshBefore(result.expires);
    this.emit("subscribed", {
      channel: this.channel,
      position: result.position,
      recovered: result.recovered,
      reason: result.reason,
    });
    this.acceptAll(result.publications ?? []);
    for (const p of this.early.splice(0)) this.accept(p);
    // The history answers a page at a time: ask for the rest (an event stream sends it).
    if (result.more && this.client.transport !== "sse") void this.recoverFrom(this.attempt);
  }

  /** @internal Recovered publications, as the history answers them. */
  acceptAll(publications: any[]): void {
    for (const p of publications) {
      this.accept({ channel: this.channel, data: dataOf(p), offset: p.offset });
    }
  }

  /** Asks the history for the pages after the position, one after another, until the last
   * (or until the subscription is restarted: its recovery takes over). */
  private async recoverFrom(attempt: number): Promise<void> {
    for (;;) {
      let result: any;
      try {
        result = await this.client.call("history", { channel: this.channel, since: this.position });
      } catch (e) {
        // The reconnect's recovery (or the gap timer) goes on from the position.
        this.emit("error", { error: e instanceof ChannelError ? e : new ChannelError(0, String(e)) });
        return;
      }
      if (this.state !== "subscribed" || attempt !== this.attempt) return;
      if (!result.recovered) {
        this.emit("error", { error: new ChannelError(0, `publications were lost: ${result.reason}`) });
        return;
      }
      this.acceptAll(result.publications);
      if (!result.more) return;
    }
  }

  /** Sends `refresh` for this channel with a new subscription token before `expires`. */
  private refreshBefore(expires: number | null | undefined): void {
    clearTimeout(this.refreshTimer);
    const getToken = this.options.getToken;
    if (expires == null || !getToken) return;
    const attempt = this.attempt;
    // Still the subscription the timer was set for (not unsubscribed, paused or restarted).
    const current = () => this.state === "subscribed" && attempt === this.attempt;
    this.refreshTimer = setTimeout(async () => {
      try {
        const token = await getToken();
        if (!current()) return;
        const result = await this.client.call("refresh", { channel: this.channel, token });
        if (current()) this.refreshBefore(result.expires);
      } catch (e) {
        // At expiry the server ends the subscription; `ended` subscribes again.
        if (current()) {
          this.emit("error", { error: e instanceof ChannelError ? e : new ChannelError(0, String(e)) });
        }
      }
    }, refreshDelay(expires));
  }

  /** @internal The server ended the subscription (an `unsubscribe` push). */
  ended(code: number, reason: string): void {
    if (this.state === "unsubscribed") return;
    clearTimeout(this.refreshTimer);
    if (code === 109 && this.options.getToken) {
      // Its token expired: subscribe again with a new one, recovering what passed.
      this.state = "subscribing";
      void this.start();
      return;
    }
    this.state = "unsubscribed";
    clearTimeout(this.gapTimer);
    this.client.forget(this.channel);
    this.emit("unsubscribed", { channel: this.channel, code, reason });
  }

  /** @internal The connection is gone: subscribe again on the next one. */
  paused(): void {
    if (this.state !== "unsubscribed") this.state = "subscribing";
    this.attempt += 1;
    clearTimeout(this.retryTimer);
    clearTimeout(this.refreshTimer);
    clearTimeout(this.gapTimer);
    this.gapTimer = undefined;
  }

  /** @internal */
  presenceChanged(kind: "join" | "leave", event: PresenceEvent): void {
    this.emit(kind, event);
  }

  /** @internal A publication, live or recovered: delivered in offset order, each once. */
  accept(p: Publication): void {
    if (this.state === "unsubscribed") return;
    if (this.state === "subscribing") {
      this.early.push(p);
      return;
    }
    if (p.offset === undefined) {
      this.emit("publication", p);
      return;
    }
    const [epoch, offset] = split(p.offset);
    const last = this.position === undefined ? undefined : split(this.position);
    if (!last || last[0] !== epoch) {
      // The first publication, or a new epoch (the history was lost): start from it.
      this.held.clear();
      this.deliver(p);
      return;
    }
    if (offset <= last[1] || this.held.has(offset)) return; // had it
    if (offset === last[1] + 1) {
      this.deliver(p);
      this.drain();
      return;
    }
    this.held.set(offset, p);
    if (!this.gapTimer) {
      this.gapTimer = setTimeout(() => void this.fillGap(), this.client.gapTimeout());
    }
  }

  private deliver(p: Publication): void {
    this.position = p.offset;
    this.emit("publication", p);
  }

  /** Delivers the held publications that now follow without a gap. */
  private drain(): void {
    for (;;) {
      const next = split(this.position!)[1] + 1;
      const p = this.held.get(next);
      if (!p) break;
      this.held.delete(next);
      this.deliver(p);
    }
    if (this.held.size === 0) {
      clearTimeout(this.gapTimer);
      this.gapTimer = undefined;
    }
  }

  /** Asks the history for what is missing before the held publications. */
  private async fillGap(): Promise<void> {
    this.gapTimer = undefined;
    if (this.held.size === 0 || this.state !== "subscribed") return;
    // An event stream takes no commands: opened again, it recovers from the position.
    if (this.client.transport === "sse") return this.client.restream();
    try {
      const result = await this.client.call("history", {
        channel: this.channel,
        since: this.position,
      });
      if (this.state !== "subscribed") return; // the reconnect recovers them
      if (result.recovered) {
        this.acceptAll(result.publications);
        if (result.more) void this.recoverFrom(this.attempt);
        return;
      }
      this.emit("error", {
        error: new ChannelError(0, `publications were lost: ${result.reason}`),
      });
    } catch (e) {
      const error = e instanceof ChannelError ? e : new ChannelError(0, String(e));
      this.emit("error", { error });
      // The connection went away or did not answer: keep what is held, the reconnect's
      // recovery (or the next gap timer) fills the gap.
      if (error.code === 0 || this.state !== "subscribed") return;
    }
    // Lost for good: go on from what is held.
    const offsets = [...this.held.keys()].sort((a, b) => a - b);
    for (const o of offsets) {
      this.deliver(this.held.get(o)!);
      this.held.delete(o);
    }
  }
}

function split(position: string): [string, number] {
  const at = position.lastIndexOf(":");
  return [position.slice(0, at), Number(position.slice(at + 1))];
}

/** How long to wait before refreshing a token that expires at `expires` (Unix seconds): 30 s
 * before, or a third of the time left when that is short; at least a second (a clock ahead
 * of the server's must not make a refresh loop), at most what setTimeout can wait (a longer
 * wait would fire at once). */
function refreshDelay(expires: number): number {
  const left = expires * 1000 - Date.now();
  return Math.min(2 ** 31 - 1, Math.max(1000, left > 90000 ? left - 30000 : (left * 2) / 3));
}

const utf8 = new TextEncoder();

/** A publication's data: `data`, or the bytes of `b64` (bytes a JSON client gets that are not
 * JSON). */
function dataOf(p: { data?: unknown; b64?: string }): unknown {
  if (typeof p.b64 !== "string") return p.data;
  const text = atob(p.b64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

/** Reads a `text/event-stream` body to its end, calling `event` with each event's type (if
 * any) and data (its `data:` lines joined by newlines); comments and other fields are
 * skipped. */
async function readEvents(
  body: ReadableStream<Uint8Array>,
  event: (name: string | undefined, data: string) => void,
): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    // Lines end at CRLF, LF or CR; a CR at the end may be half of a CRLF.
    buffered += decoder.decode(value, { stream: true });
    const whole = buffered.endsWith("\r") ? buffered.slice(0, -1) : buffered;
    const lines = whole.replace(/\r\n?/g, "\n");
    let end: number;
    let rest = lines;
    while ((end = rest.indexOf("\n\n")) >= 0) {
      let name: string | undefined;
      const data: string[] = [];
      for (const line of rest.slice(0, end).split("\n")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") name = text;
        else if (field === "data") data.push(text);
      }
      if (data.length > 0) event(name, data.join("\n"));
      rest = rest.slice(end + 2);
    }
    buffered = rest + (whole === buffered ? "" : "\r");
  }
}

/** `url` with `pair` added to its query. */
function withQuery(url: string, pair: string): string {
  const hash = url.indexOf("#");
  const base = hash < 0 ? url : url.slice(0, hash);
  return base + (base.includes("?") ? "&" : "?") + pair + (hash < 0 ? "" : url.slice(hash));
}

function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}
