/**
 * mqstate: a client for the MQTT5 state store protocol (Azure IoT Operations).
 *
 * A thin TypeScript layer over the native module (`binding.js`, built from the Rust crate in
 * `src/`): it adds the JavaScript idioms (options objects, `AbortSignal`, async iterators)
 * and nothing of the protocol. Errors are built by the native module, in one place.
 *
 * ```ts
 * import { Client } from 'mqstate';
 *
 * const client = await Client.connect('mqtt://127.0.0.1:1883');
 * await client.set('door', 'open');
 * const door = await client.get('door'); // { value: Buffer, version: Hlc } | null
 * for await (const change of client.observe('door')) {
 *   console.log(change.operation, change.value?.toString());
 *   break; // unobserves
 * }
 * for await (const key of client.scan('line3/*')) console.log(key.toString()); // listing keys
 * await client.close();
 * ```
 */

// First: on a platform with no native module, its error names the platform (platform.js).
import './platform';
import * as native from './binding';

// The test tooling of the native module (`LocalServer`, `LocalIotHub`, `FaultProxy`,
// `benchRustGet`) exists only in a build with the `testing` cargo feature (the repository's
// test suite and benchmark build it so); the released package holds the clients only. There
// these names are placeholders that throw an error saying so at the first use.

/** The error a test helper throws in a build without the test tooling. */
function missingTestTooling(name: string): Error {
  const error = new Error(
    `mqstate: ${name} is not in this build of the native module: the released package holds the ` +
      'clients only. For tests, run the `mqstate` binary (`mqstate serve --port 0` logs ' +
      '`ready url=mqtt://127.0.0.1:PORT`; see the README, "Testing with a local server"), or ' +
      'build the addon from a checkout with the test server: `npm run build:native` ' +
      '(cargo feature `testing`).',
  ) as Error & { code: string };
  error.code = 'ERR_NOT_SUPPORTED';
  return error;
}

/** `value` if the native module has it, else a stand-in that throws {@link missingTestTooling}
 * when it is called, constructed or one of its properties is read. */
function testTooling<T extends object>(name: string, value: T | undefined): T {
  if (value !== undefined) return value;
  const fail = (): never => {
    throw missingTestTooling(name);
  };
  return new Proxy(function () {} as unknown as T, {
    // Symbols (util.inspect, Symbol.toPrimitive...) read as absent, so that logging the
    // module's exports does not throw.
    get: (_target, property) => (typeof property === 'symbol' ? undefined : fail()),
    apply: fail,
    construct: fail,
  });
}

/** The local state store (embedded MQTT5 broker + store) in this process, for tests. Only in a
 * build with the `testing` cargo feature; see "Testing with a local server" in the README. */
export const LocalServer: typeof native.LocalServer = testTooling('LocalServer', native.LocalServer);
export type LocalServer = native.LocalServer;
/** The fault-injection TCP proxy of the test suites. Only with the `testing` cargo feature. */
export const FaultProxy: typeof native.FaultProxy = testTooling('FaultProxy', native.FaultProxy);
export type FaultProxy = native.FaultProxy;
export type {
  ClientOptions,
  LocalServerOptions,
  ReconnectConfig,
  SetOutcome,
  TlsConfig,
  Versioned,
} from './binding';

/** @deprecated Renamed `SetOutcome`, its name in every language; this alias will go. */
export type SetResult = native.SetOutcome;

/**
 * A version: a hybrid logical clock value `{ms}:{counter}:{nodeId}` (the version of a key,
 * the fencing token of a lock). Immutable.
 *
 * Ordered by `ms`, then `counter`, then `nodeId` compared byte-wise in UTF-8 (not by UTF-16
 * code units as JavaScript's `<` on strings would).
 *
 * ```ts
 * const a = Hlc.parse('001696374425000:00000:CLIENT');
 * const b = new Hlc(1696374425000n, 1n, 'CLIENT');
 * a.compare(b); // -1
 * [b, a].sort(Hlc.compare); // [a, b]
 * ```
 *
 * The class holds the three parts; the native core checks, parses, formats and orders them
 * (the same rules in every language). The versions the core returns are built through the
 * factory registered below, without checking their parts again.
 */
export class Hlc {
  readonly #ms: bigint;
  readonly #counter: bigint;
  readonly #nodeId: string;

  /**
   * Builds a value from its parts (`ms` and `counter` as bigint, or as safe integers).
   * Invalid parts throw an `ERR_INVALID_ARGUMENT` error.
   */
  constructor(ms: number | bigint, counter: number | bigint, nodeId: string) {
    if (!fromCore) native.hlcCheck(ms, counter, nodeId);
    this.#ms = BigInt(ms);
    this.#counter = BigInt(counter);
    this.#nodeId = nodeId;
  }

  /**
   * Parses `{ms}:{counter}:{nodeId}` (any zero padding). A malformed text throws an
   * `ERR_INVALID_ARGUMENT` error whose `reason` is the stable code of the failure
   * (`too_few_parts`, `invalid_ms`, ... as in `tests/vectors/hlc.json`).
   */
  static parse(text: string): Hlc {
    return native.hlcParse(text);
  }

  /** `Hlc.compare(a, b)`, for `versions.sort(Hlc.compare)`: -1, 0 or 1. */
  static compare(a: Hlc, b: Hlc): number {
    return native.hlcCompare(hlc('a', a), hlc('b', b));
  }

  /** Wall-clock milliseconds since the Unix epoch. */
  get ms(): bigint {
    return this.#ms;
  }

  /** Logical counter within the millisecond. */
  get counter(): bigint {
    return this.#counter;
  }

  /** The node that produced the value (`StateStore` for the local server, a client id...). */
  get nodeId(): string {
    return this.#nodeId;
  }

  /** -1, 0 or 1 as this value is lower than, equal to or greater than `other`. */
  compare(other: Hlc): number {
    return native.hlcCompare(this, hlc('other', other));
  }

  /** True if both are the same value (padding does not matter). */
  equals(other: Hlc): boolean {
    return this.compare(other) === 0;
  }

  /** The wire form: `ms` padded to 15 digits, `counter` to 5 (`001696374425000:00000:CLIENT`). */
  toString(): string {
    return native.hlcFormat(this);
  }

  /** The wire form, so that `JSON.stringify` writes versions as strings. */
  toJSON(): string {
    return this.toString();
  }
}

// Set while the factory builds a version from parts the core made (and so checked).
let fromCore = false;
native.hlcClass((ms: bigint, counter: bigint, nodeId: string) => {
  fromCore = true;
  try {
    return new Hlc(ms, counter, nodeId);
  } finally {
    fromCore = false;
  }
});

// `console.log(version)` shows the wire form.
Object.defineProperty(Hlc.prototype, Symbol.for('nodejs.util.inspect.custom'), {
  value(this: Hlc): string {
    return `Hlc(${this.toString()})`;
  },
});

function hlc(name: string, v: unknown): Hlc {
  if (v instanceof Hlc) return v;
  throw invalid(`${name} must be an Hlc, got ${describe(v)}`);
}

/** A key or a value: a string (sent as UTF-8), a `Buffer` or any `Uint8Array`. */
export type Bytes = string | Uint8Array;

/** The connection's state. */
export type ConnectionState = 'connecting' | 'connected' | 'reconnecting' | 'closed';

/** What `vdel` did. */
export type VdelOutcome = 'deleted' | 'notFound' | 'valueMismatch';

/** The `code` of every error this package rejects or throws with. */
export type ErrorCode =
  | 'ERR_INVALID_ARGUMENT'
  | 'ERR_TIMEOUT'
  | 'ERR_DISCONNECTED'
  | 'ERR_SERVICE'
  | 'ERR_UNEXPECTED_PAYLOAD'
  | 'ERR_CLOCK_DRIFT'
  | 'ERR_CONNECTION'
  | 'ERR_LAGGED'
  | 'ERR_AUTHENTICATION'
  | 'ERR_NOT_SUPPORTED'
  | 'ERR_LOCK_LOST'
  | 'ABORT_ERR';

/**
 * An error from this package: an `Error` with a stable `code`. Service errors (`ERR_SERVICE`:
 * the state store answered `-ERR ...`) also have `serviceKind` (`quota_exceeded`,
 * `fencing_token_required`, `fencing_token_lower_version`, ..., or `unknown`) and
 * `serviceText` (the server's text). A lagging observation's `ERR_LAGGED` error has `missed`,
 * the number of notifications it dropped. A cancelled call is an `AbortError` (`ABORT_ERR`) whose
 * `cause` is the signal's reason.
 */
export interface MqstateError extends Error {
  code: ErrorCode;
  serviceKind?: string;
  serviceText?: string;
  /** For `Hlc.parse`: the stable code of what was wrong (`too_few_parts`, `invalid_ms`...). */
  reason?: string;
  /** For `ERR_LAGGED`: how many notifications the observation dropped (it goes on). */
  missed?: number;
}

/** True for the errors of this package (an `Error` with one of the {@link ErrorCode}s). */
export function isMqstateError(e: unknown): e is MqstateError {
  if (!(e instanceof Error)) return false;
  const code: unknown = (e as { code?: unknown }).code;
  return typeof code === 'string' && CODES.has(code);
}

const CODES = new Set<string>([
  'ERR_INVALID_ARGUMENT',
  'ERR_TIMEOUT',
  'ERR_DISCONNECTED',
  'ERR_SERVICE',
  'ERR_UNEXPECTED_PAYLOAD',
  'ERR_CLOCK_DRIFT',
  'ERR_CONNECTION',
  'ERR_LAGGED',
  'ERR_AUTHENTICATION',
  'ERR_NOT_SUPPORTED',
  'ERR_LOCK_LOST',
  'ABORT_ERR',
]);

/** Options every call accepts. */
export interface CallOptions {
  /** Cancels the call: it rejects with an `AbortError` and the request is withdrawn. */
  signal?: AbortSignal;
  /** This call's timeout in ms (default, or 0: the client's `timeoutMs`, 10 s). It covers
   * the whole call: waiting for a connection (`ERR_DISCONNECTED` when none came) and for the
   * answer (`ERR_TIMEOUT`). */
  timeoutMs?: number;
}

/** Options of {@link Client.set}. */
export interface SetOptions extends CallOptions {
  /** Write only if the key does not exist (`NX`). */
  nx?: boolean;
  /** Write only if the key does not exist or already holds this value (`NEX`). */
  nex?: boolean;
  /** Expire the key after this many milliseconds (`PX`). */
  expiryMs?: number;
  /** The fencing token of the lock that protects the key (`__ft`). */
  fencingToken?: Hlc | string;
  /**
   * Ask the service to persist the key: the request carries `aio-persistence: true`, as the
   * official Azure IoT Operations SDKs send it. `mqstate serve --data-dir DIR --persist
   * requested` (or `LocalServer.start({ dataDir, persist: 'requested' })`) keeps only such keys.
   */
  persist?: boolean;
}

/** Options of {@link Client.del} and {@link Client.vdel}. */
export interface DelOptions extends CallOptions {
  /** The fencing token of the lock that protects the key (`__ft`). */
  fencingToken?: Hlc | string;
}

/** A change of an observed key. */
export interface Notification {
  /** The key. */
  key: Buffer;
  /** `set`, or `delete` (a DEL, a VDEL or an expiry). */
  operation: 'set' | 'delete';
  /** The new value, for `set`. */
  value?: Buffer;
  /** The key's new version (absent only for a delete made up after a reconnect). */
  version?: Hlc;
  /** True when the client made this up after a reconnect: the key changed while away. */
  synthesized: boolean;
}

function invalid(message: string): Error {
  return native.invalidArgumentError(message);
}

function checkBytes(name: string, v: unknown): void {
  if (typeof v !== 'string' && !(v instanceof Uint8Array)) {
    throw invalid(`${name} must be a string, a Buffer or a Uint8Array, got ${describe(v)}`);
  }
}

function describe(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v;
}

function token(t: Hlc | string | undefined): Hlc | undefined {
  if (t === undefined || t instanceof Hlc) return t;
  if (typeof t === 'string') return Hlc.parse(t);
  throw invalid(`fencingToken must be an Hlc or its string form, got ${describe(t)}`);
}

function abortError(signal: AbortSignal): Error {
  const e = new Error('The operation was aborted', { cause: signal.reason });
  e.name = 'AbortError';
  (e as { code?: string }).code = 'ABORT_ERR';
  return e;
}

/**
 * Runs a native call with an optional `AbortSignal`: on abort the returned promise rejects
 * at once with an `AbortError` and the native call is cancelled (its request withdrawn).
 */
function withSignal<T>(
  signal: AbortSignal | undefined,
  start: (cancel: native.CancelToken | undefined) => Promise<T>,
): Promise<T> {
  if (signal === undefined) return start(undefined);
  if (signal.aborted) return Promise.reject(abortError(signal));
  const cancel = new native.CancelToken();
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      cancel.cancel();
      reject(abortError(signal));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    start(cancel).then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

/** Runs `f`, turning a synchronous throw (a bad argument) into a rejected promise. */
function guarded<T>(f: () => Promise<T>): Promise<T> {
  try {
    return f();
  } catch (e) {
    return Promise.reject(e);
  }
}

/** The native client of a {@link Client} (for the lease, lock and election classes). */
let nativeOf: (c: Client) => native.NativeClient;

function nativeClient(c: unknown): native.NativeClient {
  if (!(c instanceof Client)) throw invalid(`client must be a Client, got ${describe(c)}`);
  return nativeOf(c);
}

/**
 * A state store client: one MQTT5 connection, any number of concurrent calls (they are
 * pipelined). Every method returns a Promise. Keys and values are strings, Buffers or
 * Uint8Arrays; values come back as Buffers.
 */
export class Client {
  readonly #native: native.NativeClient;

  static {
    nativeOf = (c) => c.#native;
  }

  private constructor(n: native.NativeClient) {
    this.#native = n;
  }

  /**
   * Connects to a broker: `Client.connect('mqtt://host:port')`, or with options
   * (`{ host, port, clientId, tls, timeoutMs, ... }`, or `{ url, ...overrides }`). Resolves
   * once connected and subscribed.
   */
  static connect(options: native.ClientOptions | string = {}): Promise<Client> {
    return guarded(() => {
      const o = typeof options === 'string' ? { url: options } : options;
      if (o === null || typeof o !== 'object') {
        throw invalid(`options must be a URL string or an object, got ${describe(o)}`);
      }
      return native.NativeClient.connect(o).then((n) => new Client(n));
    });
  }

  /**
   * Connects with the Azure IoT Operations environment variables (`AIO_BROKER_HOSTNAME`,
   * `AIO_BROKER_TCP_PORT`, `AIO_MQTT_USE_TLS`, `AIO_TLS_CA_FILE`, `AIO_SAT_FILE`,
   * `AIO_MQTT_CLIENT_ID`, ...), read from `env` (default `process.env`).
   */
  static fromEnv(env: Record<string, string | undefined> = process.env): Promise<Client> {
    return guarded(() => {
      const vars: Record<string, string> = {};
      for (const [k, v] of Object.entries(env)) {
        if (k.startsWith('AIO_') && typeof v === 'string') vars[k] = v;
      }
      return native.NativeClient.fromEnv(vars).then((n) => new Client(n));
    });
  }

  /** The MQTT client id (generated when none was given). */
  get clientId(): string {
    return this.#native.clientId;
  }

  /** The connection's state now. */
  get state(): ConnectionState {
    return this.#native.state as ConnectionState;
  }

  /** `GET`: the value and its version, or `null` when there is no such key. */
  get(key: Bytes, options?: CallOptions): Promise<native.Versioned | null> {
    return guarded(() => {
      checkBytes('key', key);
      if (options === undefined) return this.#native.get(key);
      return withSignal(options.signal, (c) => this.#native.get(key, options.timeoutMs, c));
    });
  }

  /**
   * `SET`: writes the value. With `nx` / `nex`, `applied` says whether the condition held;
   * `expiryMs` makes the key expire; `fencingToken` writes a key protected by a lock.
   */
  set(key: Bytes, value: Bytes, options?: SetOptions): Promise<native.SetOutcome> {
    return guarded(() => {
      checkBytes('key', key);
      checkBytes('value', value);
      if (options === undefined) return this.#native.set(key, value);
      const o = options;
      const ft = token(o.fencingToken);
      return withSignal(o.signal, (c) =>
        this.#native.set(key, value, o.nx, o.nex, o.expiryMs, ft, o.timeoutMs, c, o.persist),
      );
    });
  }

  /** `DEL`: the number of keys deleted (0 or 1). */
  del(key: Bytes, options?: DelOptions): Promise<number> {
    return guarded(() => {
      checkBytes('key', key);
      if (options === undefined) return this.#native.del(key);
      const o = options;
      const ft = token(o.fencingToken);
      return withSignal(o.signal, (c) => this.#native.del(key, ft, o.timeoutMs, c));
    });
  }

  /** `VDEL`: deletes the key only if it holds `value`. */
  vdel(key: Bytes, value: Bytes, options?: DelOptions): Promise<VdelOutcome> {
    return guarded(() => {
      checkBytes('key', key);
      checkBytes('value', value);
      const o = options ?? {};
      const ft = token(o.fencingToken);
      return withSignal(o.signal, (c) =>
        this.#native.vdel(key, value, ft, o.timeoutMs, c),
      ) as Promise<VdelOutcome>;
    });
  }

  /**
   * Observes a key: an async iterator of its changes, registered with the server at once
   * (`await observation.ready` to know it is). `break` out of `for await` (or `close()`) to
   * stop observing. `signal` ends the iteration with an `AbortError`.
   */
  observe(key: Bytes, options: CallOptions = {}): Observation {
    let start: Promise<native.NativeObservation>;
    try {
      checkBytes('key', key);
      start = withSignal(options.signal, (c) => this.#native.observe(key, options.timeoutMs, c));
    } catch (e) {
      start = Promise.reject(e);
    }
    return new Observation(start as Promise<NativeStream<Notification>>, options.signal);
  }

  /**
   * `SCAN`: lists the keys that match a glob pattern, a page per request. Creating the scan
   * sends nothing; `for await` over it (or `nextPage()`) asks for the pages. An empty pattern
   * throws `ERR_INVALID_ARGUMENT` right here; a malformed one (`k[`) rejects the first page
   * with the server's error (`ERR_SERVICE`).
   *
   * The pattern is a Redis `MATCH` glob over bytes: `*` any run of bytes, `?` one byte,
   * `[abc]`, `[a-z]`, `[^...]`, and `\` before a byte to match it literally. Every key that
   * exists from the first page to the last is listed exactly once (a key written or deleted
   * meanwhile may or may not be); in no particular order.
   *
   * `timeoutMs` is each page's timeout; `signal` cancels the page under way (its request is
   * withdrawn) and every later one, with an `AbortError`.
   *
   * ```ts
   * for await (const key of client.scan('line3/*')) {
   *   console.log(key.toString());               // key: Buffer
   * }
   * const scan = client.scan(Buffer.from([0x62, 0xff, 0x2a])); // binary patterns too
   * let page: Buffer[] | null;
   * while ((page = await scan.nextPage()) !== null) console.log(page.length, scan.done);
   * ```
   */
  scan(pattern: Bytes, options: CallOptions = {}): Scan {
    checkBytes('pattern', pattern);
    return new Scan(this.#native.scan(pattern, options.timeoutMs), options.signal);
  }

  /** Stops observing a key: every observation of it on this client ends. */
  unobserve(key: Bytes, options: CallOptions = {}): Promise<void> {
    return guarded(() => {
      checkBytes('key', key);
      return withSignal(options.signal, (c) => this.#native.unobserve(key, options.timeoutMs, c));
    });
  }

  /**
   * Closes the connection and waits for it: pending calls reject with `ERR_DISCONNECTED`,
   * observations end, later calls fail. Idempotent. Node can exit afterwards.
   */
  close(): Promise<void> {
    return this.#native.close();
  }

  /** Requests waiting for a response (diagnostics). */
  get requestsInFlight(): number {
    return this.#native.requestsInFlight;
  }

  /** Keys registered for notifications on this client (diagnostics). */
  get observedKeys(): number {
    return this.#native.observedKeys;
  }
}

const DONE: IteratorReturnResult<undefined> = Object.freeze({ done: true, value: undefined });

/** What the native streams (observations, lease and election events) look like. */
interface NativeStream<T> {
  next(): Promise<T | null>;
  close(): void;
}

/**
 * A stream of events as an async iterator (`for await (const e of stream)`). Iterate it
 * once. It ends when closed (`break`, `return()`, `close()`, the `signal` given when it was
 * made: then with an `AbortError`), when the client closes, or when its source ends. An
 * `ERR_LAGGED` error does not end it: it says how many notifications were dropped, and the
 * next `next()` goes on with the following ones (as in every language). Note that `for
 * await` stops at a thrown error; call `next()` again (or iterate again) to go on.
 *
 * Nothing is pushed to JavaScript: an event waits in the native module until `next()` asks
 * for it, so a stream nobody reads keeps no handle on Node's event loop.
 */
export class EventStream<T> implements AsyncIterableIterator<T> {
  readonly #start: Promise<NativeStream<T>>;
  #native: NativeStream<T> | undefined;
  #closed = false;
  readonly #signal: AbortSignal | undefined;

  /** @internal */
  constructor(start: Promise<NativeStream<T>>, signal?: AbortSignal) {
    this.#start = start;
    this.#signal = signal;
    start.then(
      (n) => {
        if (this.#closed) n.close();
        else this.#native = n;
      },
      () => {
        // Reported by the first `next()` (and by `ready`).
      },
    );
    signal?.addEventListener('abort', () => this.close(), { once: true });
  }

  /** Resolves once the stream is set up (for an observation: the server registered the
   * key); rejects if it could not be. */
  get ready(): Promise<void> {
    return this.#start.then(() => undefined);
  }

  async next(): Promise<IteratorResult<T, undefined>> {
    if (this.#closed) return this.#end();
    let n: NativeStream<T>;
    try {
      n = await this.#start;
    } catch (e) {
      // The set-up failed: thrown once, then the stream is done.
      this.#closed = true;
      throw e;
    }
    if (this.#closed) return this.#end();
    // An error (ERR_LAGGED: notifications were dropped) is thrown and the stream goes on,
    // as in every language: the core ends a stream by returning null, never by an error.
    const item: T | null = await n.next();
    if (item === null) {
      this.close();
      return this.#end();
    }
    return { done: false, value: item };
  }

  #end(): IteratorReturnResult<undefined> {
    if (this.#signal?.aborted) throw abortError(this.#signal);
    return DONE;
  }

  /** Called by `break` in `for await`: closes the stream. */
  async return(): Promise<IteratorResult<T, undefined>> {
    this.close();
    return DONE;
  }

  /** Closes the stream now (a pending `next()` resolves as done). Idempotent. */
  close(): void {
    this.#closed = true;
    this.#native?.close();
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}

/**
 * The changes of one key ({@link Client.observe}). `break` (or `close()`) unobserves the key
 * (when no other observation of it is open). An `ERR_LAGGED` error means notifications were
 * dropped because they were not read fast enough: `get` the key to resynchronise; the
 * observation goes on (call `next()` again).
 */
export class Observation extends EventStream<Notification> {}

/**
 * The keys that match a glob pattern ({@link Client.scan}), as an async iterable of keys
 * (`for await (const key of scan)`, each a `Buffer`) or a page at a time (`nextPage()`).
 *
 * Each page is one request, made when the iteration (or `nextPage()`) asks for it: nothing
 * is pushed to JavaScript, so a scan nobody reads holds nothing, and Node can exit. A page
 * may be empty and still not be the last; `done` turns true once the last page came.
 *
 * An error (a timeout, a lost connection, the server's `ERR_SERVICE` for a malformed
 * pattern) ends a `for await` loop with that error. The scan itself stays where it was:
 * `nextPage()` (or iterating again) asks for the same page again. `break` out of a loop is
 * fine: the scan holds nothing on the server, and iterating it again goes on with the keys
 * not yet read.
 *
 * ```ts
 * const scan = client.scan('sensor/?/temperature');
 * for await (const key of scan) {
 *   if (key.toString().endsWith('/9/temperature')) break;
 * }
 * const rest = await scan.nextPage(); // the keys of that page not yet read, if any
 * ```
 */
export class Scan implements AsyncIterable<Buffer> {
  readonly #native: native.NativeScan;
  readonly #signal: AbortSignal | undefined;
  /** Keys of the last page that the iteration has not yielded yet, in reverse order. */
  #unread: Buffer[] = [];

  /** @internal */
  constructor(n: native.NativeScan, signal?: AbortSignal) {
    this.#native = n;
    this.#signal = signal;
  }

  /** The pattern being listed. */
  get pattern(): Buffer {
    return this.#native.pattern;
  }

  /** True once the last page has been received: `nextPage()` then resolves with `null`. */
  get done(): boolean {
    return this.#native.done;
  }

  /**
   * Asks for the next page: its keys (possibly none), or `null` once the last page has been
   * received. After an error the scan is where it was: calling again asks for the same
   * page. Keys of a page that a `for await` loop left unread (it stopped mid-page) come
   * first, as a page of their own, without a request.
   *
   * ```ts
   * const scan = client.scan('config/*');
   * const keys: Buffer[] = [];
   * for (let page = await scan.nextPage(); page !== null; page = await scan.nextPage()) {
   *   keys.push(...page);
   * }
   * scan.done; // true
   * ```
   */
  nextPage(): Promise<Buffer[] | null> {
    if (this.#unread.length > 0) {
      const rest = this.#unread.reverse();
      this.#unread = [];
      return Promise.resolve(rest);
    }
    return withSignal(this.#signal, (c) => this.#native.nextPage(c));
  }

  /** The keys, one at a time, asking for each page when the one before has been read. */
  async *keys(): AsyncGenerator<Buffer, void, undefined> {
    for (;;) {
      const key = this.#unread.pop();
      if (key !== undefined) {
        yield key;
        continue;
      }
      const page = await this.nextPage();
      if (page === null) return;
      this.#unread = page.reverse();
    }
  }

  [Symbol.asyncIterator](): AsyncGenerator<Buffer, void, undefined> {
    return this.keys();
  }
}

// ---------------------------------------------------------------------------------------
// Leases, locks, leader election (mqstate::lock)
// ---------------------------------------------------------------------------------------

/** What happened to a {@link Lease}. */
export type LeaseEvent =
  | { type: 'acquired'; token: Hlc }
  | { type: 'renewed'; token: Hlc }
  | { type: 'lost'; reason: string }
  | { type: 'released' };

/** What a {@link LeaderElection} candidate learns. */
export type LeadershipEvent =
  | { type: 'elected'; token: Hlc }
  | { type: 'renewed'; token: Hlc }
  | { type: 'lost'; reason: string }
  | { type: 'resigned' }
  /** Another candidate leads now (`leader`), or nobody does (`null`). */
  | { type: 'newLeader'; leader: Buffer | null };

/** Options of {@link Lease} and {@link Lock}. */
export interface LeaseOptions {
  /** Appended to the holder (`holder:sessionId`), so that two processes with the same
   * holder name do not share the lease. */
  sessionId?: Bytes;
}

/** Options of the lock calls that wait. */
export interface WaitOptions {
  /** Cancels the call (it rejects with an `AbortError`). */
  signal?: AbortSignal;
}

function checkMs(name: string, v: unknown): asserts v is number {
  if (typeof v !== 'number') throw invalid(`${name} must be a number of milliseconds, got ${describe(v)}`);
}

function sessionOf(options: LeaseOptions | undefined): Bytes | undefined {
  const session = options?.sessionId;
  if (session !== undefined) checkBytes('sessionId', session);
  return session;
}

/**
 * A lease on a key: at most one holder at a time, for a ttl the holder renews. The fencing
 * token (an {@link Hlc}) of each acquire or renewal protects writes (`fencingToken` of
 * `set` / `del` / `vdel`): the server refuses a write with an older token.
 */
export class Lease {
  readonly #native: native.NativeLease;

  /** A lease on key `name`, held as `holder`. Nothing is sent until `acquire`. */
  constructor(client: Client, name: Bytes, holder: Bytes, options?: LeaseOptions) {
    const c = nativeClient(client);
    checkBytes('name', name);
    checkBytes('holder', holder);
    this.#native = new native.NativeLease(c, name, holder, sessionOf(options));
  }

  /** The lease's key. */
  get name(): Buffer {
    return this.#native.name;
  }

  /** The value written while holding the lease (`holder`, or `holder:sessionId`). */
  get holderValue(): Buffer {
    return this.#native.holderValue;
  }

  /** The token of the last acquire or renewal while the lease is believed held, or null. */
  get currentToken(): Hlc | null {
    return this.#native.currentToken;
  }

  /** Tries once: the fencing token when held (acquiring a held lease renews it), or null
   * when someone else holds it. */
  acquire(ttlMs: number, options: WaitOptions = {}): Promise<Hlc | null> {
    return guarded(() => {
      checkMs('ttlMs', ttlMs);
      return withSignal(options.signal, (c) => this.#native.acquire(ttlMs, c));
    });
  }

  /** Acquires, waiting up to `timeoutMs` for the holder to release it or for its lease to
   * expire (woken by the release's notification, no polling); `ERR_TIMEOUT` otherwise. */
  acquireWait(ttlMs: number, timeoutMs: number, options: WaitOptions = {}): Promise<Hlc> {
    return guarded(() => {
      checkMs('ttlMs', ttlMs);
      checkMs('timeoutMs', timeoutMs);
      return withSignal(options.signal, (c) => this.#native.acquireWait(ttlMs, timeoutMs, c));
    });
  }

  /** Renews with the last ttl: the new (greater) token, or null if the lease was lost. */
  renew(options: WaitOptions = {}): Promise<Hlc | null> {
    return withSignal(options.signal, (c) => this.#native.renew(c));
  }

  /** Renews in the background every `fraction` x ttl (default 0.5) until a renewal fails
   * (a `lost` event), `stopRenewal()` or `release()`. Needs an acquired lease. Keeps no
   * handle on Node's event loop. */
  autoRenew(fraction?: number): void {
    this.#native.autoRenew(fraction);
  }

  /** Stops the automatic renewal (the lease stays held until its ttl passes). */
  stopRenewal(): void {
    this.#native.stopRenewal();
  }

  /** Gives the lease up: true if this holder held it. */
  release(options: WaitOptions = {}): Promise<boolean> {
    return withSignal(options.signal, (c) => this.#native.release(c));
  }

  /** Who holds the lease now, or null. */
  holder(options: WaitOptions = {}): Promise<Buffer | null> {
    return withSignal(options.signal, (c) => this.#native.holder(c));
  }

  /** The lease's events from now on, as an async iterator. */
  events(): EventStream<LeaseEvent> {
    return new EventStream(
      Promise.resolve(this.#native.events() as NativeStream<LeaseEvent>),
    );
  }
}

/**
 * A held {@link Lock}: `token` fences the writes it protects. `unlock()` releases it; a
 * guard that is dropped instead lets the lock expire after its ttl.
 */
export class LockGuard {
  readonly #native: native.NativeLockGuard;
  /** The fencing token to pass with every write the lock protects. */
  readonly token: Hlc;

  /** @internal */
  constructor(n: native.NativeLockGuard) {
    this.#native = n;
    this.token = n.token;
  }

  /** Releases the lock: true if it was still held by us (false on a second call). */
  unlock(): Promise<boolean> {
    return this.#native.unlock();
  }
}

/**
 * A lock: a lease used as a mutex. Mutual exclusion is between holders: give every
 * concurrent user its own holder (or `sessionId`).
 */
export class Lock {
  readonly #native: native.NativeLock;

  /** The lock `name`, taken as `holder`. */
  constructor(client: Client, name: Bytes, holder: Bytes, options?: LeaseOptions) {
    const c = nativeClient(client);
    checkBytes('name', name);
    checkBytes('holder', holder);
    this.#native = new native.NativeLock(c, name, holder, sessionOf(options));
  }

  /** The lock's key. */
  get name(): Buffer {
    return this.#native.name;
  }

  /** The value written while holding the lock. */
  get holderValue(): Buffer {
    return this.#native.holderValue;
  }

  /** Takes the lock for `ttlMs`, waiting up to `timeoutMs` for it (`ERR_TIMEOUT` then). */
  lock(ttlMs: number, timeoutMs: number, options: WaitOptions = {}): Promise<LockGuard> {
    return guarded(() => {
      checkMs('ttlMs', ttlMs);
      checkMs('timeoutMs', timeoutMs);
      return withSignal(options.signal, (c) => this.#native.lock(ttlMs, timeoutMs, c)).then(
        (g) => new LockGuard(g),
      );
    });
  }

  /** Who holds the lock now, or null. */
  holder(options: WaitOptions = {}): Promise<Buffer | null> {
    return withSignal(options.signal, (c) => this.#native.holder(c));
  }

  /**
   * Runs `f(token)` under the lock and unlocks afterwards (also when `f` throws). Resolves
   * with what `f` resolved with.
   */
  async withLock<T>(
    ttlMs: number,
    timeoutMs: number,
    f: (token: Hlc) => T | Promise<T>,
    options: WaitOptions = {},
  ): Promise<T> {
    const guard = await this.lock(ttlMs, timeoutMs, options);
    try {
      return await f(guard.token);
    } finally {
      await guard.unlock();
    }
  }

  /**
   * A fenced read-modify-write under the lock: gets `key`, calls `f` with its value (or
   * null), then sets the value `f` returned (or deletes the key for `null`) with the lock's
   * fencing token, and unlocks. Resolves with the new value.
   */
  async edit(
    key: Bytes,
    ttlMs: number,
    timeoutMs: number,
    f: (old: Buffer | null) => Bytes | null | Promise<Bytes | null>,
  ): Promise<Buffer | null> {
    checkBytes('key', key);
    checkMs('ttlMs', ttlMs);
    checkMs('timeoutMs', timeoutMs);
    // The core runs the edit (Lock::edit_async) and holds the lock meanwhile; this side only
    // computes the new value.
    const edit = await this.#native.editStart(key, ttlMs, timeoutMs);
    let value: Bytes | null;
    try {
      value = await f(edit.old);
      if (value !== null) checkBytes('the value returned by f', value);
    } catch (e) {
      await edit.abandon();
      throw e;
    }
    return edit.finish(value);
  }
}

/** Options of {@link LeaderElection}. */
export interface LeaderElectionOptions {
  /** Renew the term every `renewFraction` x term (default 0.5). */
  renewFraction?: number;
}

/**
 * A candidate in a leader election: the leader holds the election's key (a lease) and
 * renews it automatically; the others wait for it.
 */
export class LeaderElection {
  readonly #native: native.NativeLeaderElection;

  /** Candidate `candidate` in the election whose key is `election`. */
  constructor(client: Client, election: Bytes, candidate: Bytes, options: LeaderElectionOptions = {}) {
    const c = nativeClient(client);
    checkBytes('election', election);
    checkBytes('candidate', candidate);
    this.#native = new native.NativeLeaderElection(c, election, candidate, options.renewFraction);
  }

  /** Campaigns until elected (resolves with the fencing token) or `timeoutMs` passes
   * (`ERR_TIMEOUT`). The term is then renewed automatically until `resign()` or a loss. */
  campaign(termMs: number, timeoutMs: number, options: WaitOptions = {}): Promise<Hlc> {
    return guarded(() => {
      checkMs('termMs', termMs);
      checkMs('timeoutMs', timeoutMs);
      return withSignal(options.signal, (c) => this.#native.campaign(termMs, timeoutMs, c));
    });
  }

  /** Tries once: the fencing token if elected, else null. */
  tryCampaign(termMs: number, options: WaitOptions = {}): Promise<Hlc | null> {
    return guarded(() => {
      checkMs('termMs', termMs);
      return withSignal(options.signal, (c) => this.#native.tryCampaign(termMs, c));
    });
  }

  /** Steps down if leading: true if this candidate held the election key. */
  resign(options: WaitOptions = {}): Promise<boolean> {
    return withSignal(options.signal, (c) => this.#native.resign(c));
  }

  /** The current leader, or null. */
  leader(options: WaitOptions = {}): Promise<Buffer | null> {
    return withSignal(options.signal, (c) => this.#native.leader(c));
  }

  /** True while this candidate believes it leads. */
  get isLeader(): boolean {
    return this.#native.isLeader;
  }

  /** The fencing token of the current term, while leading. */
  get currentToken(): Hlc | null {
    return this.#native.currentToken;
  }

  /** The leadership changes from now on (`await events.ready` to know the election key is
   * observed). */
  events(): EventStream<LeadershipEvent> {
    return new EventStream(this.#native.events() as Promise<NativeStream<LeadershipEvent>>);
  }
}

/** The GETs per second of the Rust client, `depth` in flight (for the benchmark). Only in a
 * build with the `testing` cargo feature. */
export function benchRustGet(url: string, n: number, depth: number): Promise<number> {
  if (native.benchRustGet === undefined) return Promise.reject(missingTestTooling('benchRustGet'));
  return native.benchRustGet(url, n, depth);
}

// ---------------------------------------------------------------------------------------
// IoT Hub device client (mqstate::iothub)
// ---------------------------------------------------------------------------------------

/** The local IoT Hub in this process, for tests. Only in a build with the `testing` cargo
 * feature. */
export const LocalIotHub: typeof native.LocalIotHub = testTooling('LocalIotHub', native.LocalIotHub);
export type LocalIotHub = native.LocalIotHub;
export type {
  DeviceConnectOptions,
  DeviceStats,
  HubSendOptions,
  HubStartOptions,
  HubTelemetry,
  Property,
} from './binding';

/** Telemetry options for {@link DeviceClient.sendEvent}. */
export interface EventOptions {
  /** Application properties in order; a `null` value is a null property. */
  properties?: native.Property[];
  /** `$.mid`. */
  messageId?: string;
  /** `$.ct`. */
  contentType?: string;
}

/**
 * A received cloud-to-device message. Nothing is settled until the application says so:
 * `await msg.complete()`, or over AMQP `msg.reject()` (the hub dead-letters it) or
 * `msg.abandon()` (the hub delivers it again). Over MQTT completions are acknowledged in
 * arrival order, and `reject()` and `abandon()` reject with `ERR_NOT_SUPPORTED` (IoT Hub has
 * neither over MQTT). A settlement the hub can no longer take (the message's connection was
 * lost, or the hub delivered it again) rejects with `ERR_LOCK_LOST`.
 */
export class C2dMessage {
  /** @internal */
  constructor(private readonly native: native.NativeC2dMessage) {}
  get payload(): Buffer {
    return this.native.payload;
  }
  get messageId(): string | null {
    return this.native.messageId;
  }
  get correlationId(): string | null {
    return this.native.correlationId;
  }
  get userId(): string | null {
    return this.native.userId;
  }
  get to(): string | null {
    return this.native.to;
  }
  get expiryTime(): string | null {
    return this.native.expiryTime;
  }
  get contentType(): string | null {
    return this.native.contentType;
  }
  get contentEncoding(): string | null {
    return this.native.contentEncoding;
  }
  get ack(): string | null {
    return this.native.ack;
  }
  /** Application properties in order; `value` is `null` for a null property, `''` for an empty one. */
  get properties(): native.Property[] {
    return this.native.properties;
  }
  /** True when the message was delivered before (at-least-once delivery). */
  get isRedelivery(): boolean {
    return this.native.isRedelivery;
  }
  /** Over AMQP, how many times the hub delivered the message before (0 the first time, one
   * more after each abandon or lost lock); `null` over MQTT. */
  get deliveryCount(): number | null {
    return this.native.deliveryCount;
  }
  /** Completes the message (over MQTT its PUBACK goes out in arrival order; over AMQP it is
   * settled on its own): the hub's feedback says `Success`. */
  async complete(): Promise<void> {
    this.native.complete();
  }
  /** Rejects the message over AMQP: the hub dead-letters it (feedback `Rejected`). Rejects
   * with `ERR_NOT_SUPPORTED` over MQTT. */
  async reject(): Promise<void> {
    this.native.reject();
  }
  /** Abandons the message over AMQP: the hub delivers it again (`deliveryCount` + 1), or
   * dead-letters it once it was delivered its maximum number of times (feedback
   * `DeliveryCountExceeded`). Rejects with `ERR_NOT_SUPPORTED` over MQTT. */
  async abandon(): Promise<void> {
    this.native.abandon();
  }
}

/**
 * An IoT Hub device client over MQTT 3.1.1 (the default) or AMQP 1.0 (`transport: 'amqp'`),
 * authenticated by a shared access key, a SAS token or an X.509 certificate (`certFile` and
 * `keyFile` with a connection string that says `x509=true`).
 *
 * ```ts
 * const device = await DeviceClient.connect('HostName=...;DeviceId=dev1;SharedAccessKey=...');
 * for await (const msg of device) {
 *   console.log(msg.messageId, msg.properties, msg.payload.toString());
 *   await msg.complete();
 * }
 * ```
 */
export class DeviceClient implements AsyncIterable<C2dMessage> {
  private constructor(private readonly native: native.NativeDeviceClient) {}

  /** Connects (resolves once subscribed to the device's C2D messages). A mistake in the
   * options (an unknown transport, `certFile` without `keyFile`, `tls: false` with a TLS
   * file...) rejects with `ERR_INVALID_ARGUMENT` before any connection is tried. */
  static async connect(
    connectionString: string,
    options?: native.DeviceConnectOptions,
  ): Promise<DeviceClient> {
    return new DeviceClient(await native.NativeDeviceClient.connect(connectionString, options));
  }

  get deviceId(): string {
    return this.native.deviceId;
  }

  get state(): ConnectionState {
    return this.native.state as ConnectionState;
  }

  /** Counters of the client's life (received, redelivered, acknowledged, rejected, abandoned,
   * tokenRenewals...). */
  get stats(): native.DeviceStats {
    return this.native.stats;
  }

  /**
   * The next message; rejects with `ERR_DISCONNECTED` once the client is closed (after the
   * buffered messages were taken).
   */
  receive(): Promise<C2dMessage>;
  /**
   * The next message, waiting at most `timeoutMs`: `null` when none came in time (a message
   * arriving as the wait ends is kept for the next call, never lost).
   */
  receive(timeoutMs: number): Promise<C2dMessage | null>;
  async receive(timeoutMs?: number): Promise<C2dMessage | null> {
    const m = await this.native.receive(timeoutMs);
    return m == null ? null : new C2dMessage(m);
  }

  /** The messages until the client is closed (then the iteration ends). */
  async *messages(): AsyncGenerator<C2dMessage, void, undefined> {
    for (;;) {
      let msg: C2dMessage;
      try {
        msg = await this.receive();
      } catch (e) {
        if ((e as { code?: string }).code === 'ERR_DISCONNECTED' && this.state === 'closed') {
          return;
        }
        throw e;
      }
      yield msg;
    }
  }

  [Symbol.asyncIterator](): AsyncGenerator<C2dMessage, void, undefined> {
    return this.messages();
  }

  /** Sends telemetry; resolves on the hub's PUBACK. */
  sendEvent(payload: Bytes, options: EventOptions = {}): Promise<void> {
    return this.native.sendEvent(
      payload,
      options.properties,
      options.messageId,
      options.contentType,
    );
  }

  /** Disconnects; uncompleted messages stay in the hub's queue. */
  close(): Promise<void> {
    return this.native.close();
  }
}
