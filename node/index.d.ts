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
import './platform';
import * as native from './binding';
/** The local state store (embedded MQTT5 broker + store) in this process, for tests. Only in a
 * build with the `testing` cargo feature; see "Testing with a local server" in the README. */
export declare const LocalServer: typeof native.LocalServer;
export type LocalServer = native.LocalServer;
/** The fault-injection TCP proxy of the test suites. Only with the `testing` cargo feature. */
export declare const FaultProxy: typeof native.FaultProxy;
export type FaultProxy = native.FaultProxy;
export type { ClientOptions, LocalServerOptions, ReconnectConfig, SetOutcome, TlsConfig, Versioned, } from './binding';
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
export declare class Hlc {
    #private;
    /**
     * Builds a value from its parts (`ms` and `counter` as bigint, or as safe integers).
     * Invalid parts throw an `ERR_INVALID_ARGUMENT` error.
     */
    constructor(ms: number | bigint, counter: number | bigint, nodeId: string);
    /**
     * Parses `{ms}:{counter}:{nodeId}` (any zero padding). A malformed text throws an
     * `ERR_INVALID_ARGUMENT` error whose `reason` is the stable code of the failure
     * (`too_few_parts`, `invalid_ms`, ... as in `tests/vectors/hlc.json`).
     */
    static parse(text: string): Hlc;
    /** `Hlc.compare(a, b)`, for `versions.sort(Hlc.compare)`: -1, 0 or 1. */
    static compare(a: Hlc, b: Hlc): number;
    /** Wall-clock milliseconds since the Unix epoch. */
    get ms(): bigint;
    /** Logical counter within the millisecond. */
    get counter(): bigint;
    /** The node that produced the value (`StateStore` for the local server, a client id...). */
    get nodeId(): string;
    /** -1, 0 or 1 as this value is lower than, equal to or greater than `other`. */
    compare(other: Hlc): number;
    /** True if both are the same value (padding does not matter). */
    equals(other: Hlc): boolean;
    /** The wire form: `ms` padded to 15 digits, `counter` to 5 (`001696374425000:00000:CLIENT`). */
    toString(): string;
    /** The wire form, so that `JSON.stringify` writes versions as strings. */
    toJSON(): string;
}
/** A key or a value: a string (sent as UTF-8), a `Buffer` or any `Uint8Array`. */
export type Bytes = string | Uint8Array;
/** The connection's state. */
export type ConnectionState = 'connecting' | 'connected' | 'reconnecting' | 'closed';
/** What `vdel` did. */
export type VdelOutcome = 'deleted' | 'notFound' | 'valueMismatch';
/** The `code` of every error this package rejects or throws with. */
export type ErrorCode = 'ERR_INVALID_ARGUMENT' | 'ERR_TIMEOUT' | 'ERR_DISCONNECTED' | 'ERR_SERVICE' | 'ERR_UNEXPECTED_PAYLOAD' | 'ERR_CLOCK_DRIFT' | 'ERR_CONNECTION' | 'ERR_LAGGED' | 'ERR_AUTHENTICATION' | 'ERR_NOT_SUPPORTED' | 'ERR_LOCK_LOST' | 'ABORT_ERR';
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
export declare function isMqstateError(e: unknown): e is MqstateError;
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
/**
 * A state store client: one MQTT5 connection, any number of concurrent calls (they are
 * pipelined). Every method returns a Promise. Keys and values are strings, Buffers or
 * Uint8Arrays; values come back as Buffers.
 */
export declare class Client {
    #private;
    private constructor();
    /**
     * Connects to a broker: `Client.connect('mqtt://host:port')`, or with options
     * (`{ host, port, clientId, tls, timeoutMs, ... }`, or `{ url, ...overrides }`). Resolves
     * once connected and subscribed.
     */
    static connect(options?: native.ClientOptions | string): Promise<Client>;
    /**
     * Connects with the Azure IoT Operations environment variables (`AIO_BROKER_HOSTNAME`,
     * `AIO_BROKER_TCP_PORT`, `AIO_MQTT_USE_TLS`, `AIO_TLS_CA_FILE`, `AIO_SAT_FILE`,
     * `AIO_MQTT_CLIENT_ID`, ...), read from `env` (default `process.env`).
     */
    static fromEnv(env?: Record<string, string | undefined>): Promise<Client>;
    /** The MQTT client id (generated when none was given). */
    get clientId(): string;
    /** The connection's state now. */
    get state(): ConnectionState;
    /** `GET`: the value and its version, or `null` when there is no such key. */
    get(key: Bytes, options?: CallOptions): Promise<native.Versioned | null>;
    /**
     * `SET`: writes the value. With `nx` / `nex`, `applied` says whether the condition held;
     * `expiryMs` makes the key expire; `fencingToken` writes a key protected by a lock.
     */
    set(key: Bytes, value: Bytes, options?: SetOptions): Promise<native.SetOutcome>;
    /** `DEL`: the number of keys deleted (0 or 1). */
    del(key: Bytes, options?: DelOptions): Promise<number>;
    /** `VDEL`: deletes the key only if it holds `value`. */
    vdel(key: Bytes, value: Bytes, options?: DelOptions): Promise<VdelOutcome>;
    /**
     * Observes a key: an async iterator of its changes, registered with the server at once
     * (`await observation.ready` to know it is). `break` out of `for await` (or `close()`) to
     * stop observing. `signal` ends the iteration with an `AbortError`.
     */
    observe(key: Bytes, options?: CallOptions): Observation;
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
    scan(pattern: Bytes, options?: CallOptions): Scan;
    /** Stops observing a key: every observation of it on this client ends. */
    unobserve(key: Bytes, options?: CallOptions): Promise<void>;
    /**
     * Closes the connection and waits for it: pending calls reject with `ERR_DISCONNECTED`,
     * observations end, later calls fail. Idempotent. Node can exit afterwards.
     */
    close(): Promise<void>;
    /** Requests waiting for a response (diagnostics). */
    get requestsInFlight(): number;
    /** Keys registered for notifications on this client (diagnostics). */
    get observedKeys(): number;
}
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
export declare class EventStream<T> implements AsyncIterableIterator<T> {
    #private;
    /** @internal */
    constructor(start: Promise<NativeStream<T>>, signal?: AbortSignal);
    /** Resolves once the stream is set up (for an observation: the server registered the
     * key); rejects if it could not be. */
    get ready(): Promise<void>;
    next(): Promise<IteratorResult<T, undefined>>;
    /** Called by `break` in `for await`: closes the stream. */
    return(): Promise<IteratorResult<T, undefined>>;
    /** Closes the stream now (a pending `next()` resolves as done). Idempotent. */
    close(): void;
    [Symbol.asyncIterator](): this;
}
/**
 * The changes of one key ({@link Client.observe}). `break` (or `close()`) unobserves the key
 * (when no other observation of it is open). An `ERR_LAGGED` error means notifications were
 * dropped because they were not read fast enough: `get` the key to resynchronise; the
 * observation goes on (call `next()` again).
 */
export declare class Observation extends EventStream<Notification> {
}
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
export declare class Scan implements AsyncIterable<Buffer> {
    #private;
    /** @internal */
    constructor(n: native.NativeScan, signal?: AbortSignal);
    /** The pattern being listed. */
    get pattern(): Buffer;
    /** True once the last page has been received: `nextPage()` then resolves with `null`. */
    get done(): boolean;
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
    nextPage(): Promise<Buffer[] | null>;
    /** The keys, one at a time, asking for each page when the one before has been read. */
    keys(): AsyncGenerator<Buffer, void, undefined>;
    [Symbol.asyncIterator](): AsyncGenerator<Buffer, void, undefined>;
}
/** What happened to a {@link Lease}. */
export type LeaseEvent = {
    type: 'acquired';
    token: Hlc;
} | {
    type: 'renewed';
    token: Hlc;
} | {
    type: 'lost';
    reason: string;
} | {
    type: 'released';
};
/** What a {@link LeaderElection} candidate learns. */
export type LeadershipEvent = {
    type: 'elected';
    token: Hlc;
} | {
    type: 'renewed';
    token: Hlc;
} | {
    type: 'lost';
    reason: string;
} | {
    type: 'resigned';
}
/** Another candidate leads now (`leader`), or nobody does (`null`). */
 | {
    type: 'newLeader';
    leader: Buffer | null;
};
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
/**
 * A lease on a key: at most one holder at a time, for a ttl the holder renews. The fencing
 * token (an {@link Hlc}) of each acquire or renewal protects writes (`fencingToken` of
 * `set` / `del` / `vdel`): the server refuses a write with an older token.
 */
export declare class Lease {
    #private;
    /** A lease on key `name`, held as `holder`. Nothing is sent until `acquire`. */
    constructor(client: Client, name: Bytes, holder: Bytes, options?: LeaseOptions);
    /** The lease's key. */
    get name(): Buffer;
    /** The value written while holding the lease (`holder`, or `holder:sessionId`). */
    get holderValue(): Buffer;
    /** The token of the last acquire or renewal while the lease is believed held, or null. */
    get currentToken(): Hlc | null;
    /** Tries once: the fencing token when held (acquiring a held lease renews it), or null
     * when someone else holds it. */
    acquire(ttlMs: number, options?: WaitOptions): Promise<Hlc | null>;
    /** Acquires, waiting up to `timeoutMs` for the holder to release it or for its lease to
     * expire (woken by the release's notification, no polling); `ERR_TIMEOUT` otherwise. */
    acquireWait(ttlMs: number, timeoutMs: number, options?: WaitOptions): Promise<Hlc>;
    /** Renews with the last ttl: the new (greater) token, or null if the lease was lost. */
    renew(options?: WaitOptions): Promise<Hlc | null>;
    /** Renews in the background every `fraction` x ttl (default 0.5) until a renewal fails
     * (a `lost` event), `stopRenewal()` or `release()`. Needs an acquired lease. Keeps no
     * handle on Node's event loop. */
    autoRenew(fraction?: number): void;
    /** Stops the automatic renewal (the lease stays held until its ttl passes). */
    stopRenewal(): void;
    /** Gives the lease up: true if this holder held it. */
    release(options?: WaitOptions): Promise<boolean>;
    /** Who holds the lease now, or null. */
    holder(options?: WaitOptions): Promise<Buffer | null>;
    /** The lease's events from now on, as an async iterator. */
    events(): EventStream<LeaseEvent>;
}
/**
 * A held {@link Lock}: `token` fences the writes it protects. `unlock()` releases it; a
 * guard that is dropped instead lets the lock expire after its ttl.
 */
export declare class LockGuard {
    #private;
    /** The fencing token to pass with every write the lock protects. */
    readonly token: Hlc;
    /** @internal */
    constructor(n: native.NativeLockGuard);
    /** Releases the lock: true if it was still held by us (false on a second call). */
    unlock(): Promise<boolean>;
}
/**
 * A lock: a lease used as a mutex. Mutual exclusion is between holders: give every
 * concurrent user its own holder (or `sessionId`).
 */
export declare class Lock {
    #private;
    /** The lock `name`, taken as `holder`. */
    constructor(client: Client, name: Bytes, holder: Bytes, options?: LeaseOptions);
    /** The lock's key. */
    get name(): Buffer;
    /** The value written while holding the lock. */
    get holderValue(): Buffer;
    /** Takes the lock for `ttlMs`, waiting up to `timeoutMs` for it (`ERR_TIMEOUT` then). */
    lock(ttlMs: number, timeoutMs: number, options?: WaitOptions): Promise<LockGuard>;
    /** Who holds the lock now, or null. */
    holder(options?: WaitOptions): Promise<Buffer | null>;
    /**
     * Runs `f(token)` under the lock and unlocks afterwards (also when `f` throws). Resolves
     * with what `f` resolved with.
     */
    withLock<T>(ttlMs: number, timeoutMs: number, f: (token: Hlc) => T | Promise<T>, options?: WaitOptions): Promise<T>;
    /**
     * A fenced read-modify-write under the lock: gets `key`, calls `f` with its value (or
     * null), then sets the value `f` returned (or deletes the key for `null`) with the lock's
     * fencing token, and unlocks. Resolves with the new value.
     */
    edit(key: Bytes, ttlMs: number, timeoutMs: number, f: (old: Buffer | null) => Bytes | null | Promise<Bytes | null>): Promise<Buffer | null>;
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
export declare class LeaderElection {
    #private;
    /** Candidate `candidate` in the election whose key is `election`. */
    constructor(client: Client, election: Bytes, candidate: Bytes, options?: LeaderElectionOptions);
    /** Campaigns until elected (resolves with the fencing token) or `timeoutMs` passes
     * (`ERR_TIMEOUT`). The term is then renewed automatically until `resign()` or a loss. */
    campaign(termMs: number, timeoutMs: number, options?: WaitOptions): Promise<Hlc>;
    /** Tries once: the fencing token if elected, else null. */
    tryCampaign(termMs: number, options?: WaitOptions): Promise<Hlc | null>;
    /** Steps down if leading: true if this candidate held the election key. */
    resign(options?: WaitOptions): Promise<boolean>;
    /** The current leader, or null. */
    leader(options?: WaitOptions): Promise<Buffer | null>;
    /** True while this candidate believes it leads. */
    get isLeader(): boolean;
    /** The fencing token of the current term, while leading. */
    get currentToken(): Hlc | null;
    /** The leadership changes from now on (`await events.ready` to know the election key is
     * observed). */
    events(): EventStream<LeadershipEvent>;
}
/** The GETs per second of the Rust client, `depth` in flight (for the benchmark). Only in a
 * build with the `testing` cargo feature. */
export declare function benchRustGet(url: string, n: number, depth: number): Promise<number>;
/** The local IoT Hub in this process, for tests. Only in a build with the `testing` cargo
 * feature. */
export declare const LocalIotHub: typeof native.LocalIotHub;
export type LocalIotHub = native.LocalIotHub;
export type { DeviceConnectOptions, DeviceStats, HubSendOptions, HubStartOptions, HubTelemetry, Property, } from './binding';
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
export declare class C2dMessage {
    private readonly native;
    /** @internal */
    constructor(native: native.NativeC2dMessage);
    get payload(): Buffer;
    get messageId(): string | null;
    get correlationId(): string | null;
    get userId(): string | null;
    get to(): string | null;
    get expiryTime(): string | null;
    get contentType(): string | null;
    get contentEncoding(): string | null;
    get ack(): string | null;
    /** Application properties in order; `value` is `null` for a null property, `''` for an empty one. */
    get properties(): native.Property[];
    /** True when the message was delivered before (at-least-once delivery). */
    get isRedelivery(): boolean;
    /** Over AMQP, how many times the hub delivered the message before (0 the first time, one
     * more after each abandon or lost lock); `null` over MQTT. */
    get deliveryCount(): number | null;
    /** Completes the message (over MQTT its PUBACK goes out in arrival order; over AMQP it is
     * settled on its own): the hub's feedback says `Success`. */
    complete(): Promise<void>;
    /** Rejects the message over AMQP: the hub dead-letters it (feedback `Rejected`). Rejects
     * with `ERR_NOT_SUPPORTED` over MQTT. */
    reject(): Promise<void>;
    /** Abandons the message over AMQP: the hub delivers it again (`deliveryCount` + 1), or
     * dead-letters it once it was delivered its maximum number of times (feedback
     * `DeliveryCountExceeded`). Rejects with `ERR_NOT_SUPPORTED` over MQTT. */
    abandon(): Promise<void>;
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
export declare class DeviceClient implements AsyncIterable<C2dMessage> {
    private readonly native;
    private constructor();
    /** Connects (resolves once subscribed to the device's C2D messages). A mistake in the
     * options (an unknown transport, `certFile` without `keyFile`, `tls: false` with a TLS
     * file...) rejects with `ERR_INVALID_ARGUMENT` before any connection is tried. */
    static connect(connectionString: string, options?: native.DeviceConnectOptions): Promise<DeviceClient>;
    get deviceId(): string;
    get state(): ConnectionState;
    /** Counters of the client's life (received, redelivered, acknowledged, rejected, abandoned,
     * tokenRenewals...). */
    get stats(): native.DeviceStats;
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
    /** The messages until the client is closed (then the iteration ends). */
    messages(): AsyncGenerator<C2dMessage, void, undefined>;
    [Symbol.asyncIterator](): AsyncGenerator<C2dMessage, void, undefined>;
    /** Sends telemetry; resolves on the hub's PUBACK. */
    sendEvent(payload: Bytes, options?: EventOptions): Promise<void>;
    /** Disconnects; uncompleted messages stay in the hub's queue. */
    close(): Promise<void>;
}
