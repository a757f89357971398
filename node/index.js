"use strict";
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
var __createBinding = (this && this.__createBinding) || (Object.create ? (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    var desc = Object.getOwnPropertyDescriptor(m, k);
    if (!desc || ("get" in desc ? !m.__esModule : desc.writable || desc.configurable)) {
      desc = { enumerable: true, get: function() { return m[k]; } };
    }
    Object.defineProperty(o, k2, desc);
}) : (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    o[k2] = m[k];
}));
var __setModuleDefault = (this && this.__setModuleDefault) || (Object.create ? (function(o, v) {
    Object.defineProperty(o, "default", { enumerable: true, value: v });
}) : function(o, v) {
    o["default"] = v;
});
var __importStar = (this && this.__importStar) || (function () {
    var ownKeys = function(o) {
        ownKeys = Object.getOwnPropertyNames || function (o) {
            var ar = [];
            for (var k in o) if (Object.prototype.hasOwnProperty.call(o, k)) ar[ar.length] = k;
            return ar;
        };
        return ownKeys(o);
    };
    return function (mod) {
        if (mod && mod.__esModule) return mod;
        var result = {};
        if (mod != null) for (var k = ownKeys(mod), i = 0; i < k.length; i++) if (k[i] !== "default") __createBinding(result, mod, k[i]);
        __setModuleDefault(result, mod);
        return result;
    };
})();
Object.defineProperty(exports, "__esModule", { value: true });
exports.DeviceClient = exports.C2dMessage = exports.LocalIotHub = exports.LeaderElection = exports.Lock = exports.LockGuard = exports.Lease = exports.Scan = exports.Observation = exports.EventStream = exports.Client = exports.Hlc = exports.FaultProxy = exports.LocalServer = void 0;
exports.isMqstateError = isMqstateError;
exports.benchRustGet = benchRustGet;
// First: on a platform with no native module, its error names the platform (platform.js).
require("./platform");
const native = __importStar(require("./binding"));
// The test tooling of the native module (`LocalServer`, `LocalIotHub`, `FaultProxy`,
// `benchRustGet`) exists only in a build with the `testing` cargo feature (the repository's
// test suite and benchmark build it so); the released package holds the clients only. There
// these names are placeholders that throw an error saying so at the first use.
/** The error a test helper throws in a build without the test tooling. */
function missingTestTooling(name) {
    const error = new Error(`mqstate: ${name} is not in this build of the native module: the released package holds the ` +
        'clients only. For tests, run the `mqstate` binary (`mqstate serve --port 0` logs ' +
        '`ready url=mqtt://127.0.0.1:PORT`; see the README, "Testing with a local server"), or ' +
        'build the addon from a checkout with the test server: `npm run build:native` ' +
        '(cargo feature `testing`).');
    error.code = 'ERR_NOT_SUPPORTED';
    return error;
}
/** `value` if the native module has it, else a stand-in that throws {@link missingTestTooling}
 * when it is called, constructed or one of its properties is read. */
function testTooling(name, value) {
    if (value !== undefined)
        return value;
    const fail = () => {
        throw missingTestTooling(name);
    };
    return new Proxy(function () { }, {
        // Symbols (util.inspect, Symbol.toPrimitive...) read as absent, so that logging the
        // module's exports does not throw.
        get: (_target, property) => (typeof property === 'symbol' ? undefined : fail()),
        apply: fail,
        construct: fail,
    });
}
/** The local state store (embedded MQTT5 broker + store) in this process, for tests. Only in a
 * build with the `testing` cargo feature; see "Testing with a local server" in the README. */
exports.LocalServer = testTooling('LocalServer', native.LocalServer);
/** The fault-injection TCP proxy of the test suites. Only with the `testing` cargo feature. */
exports.FaultProxy = testTooling('FaultProxy', native.FaultProxy);
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
class Hlc {
    #ms;
    #counter;
    #nodeId;
    /**
     * Builds a value from its parts (`ms` and `counter` as bigint, or as safe integers).
     * Invalid parts throw an `ERR_INVALID_ARGUMENT` error.
     */
    constructor(ms, counter, nodeId) {
        if (!fromCore)
            native.hlcCheck(ms, counter, nodeId);
        this.#ms = BigInt(ms);
        this.#counter = BigInt(counter);
        this.#nodeId = nodeId;
    }
    /**
     * Parses `{ms}:{counter}:{nodeId}` (any zero padding). A malformed text throws an
     * `ERR_INVALID_ARGUMENT` error whose `reason` is the stable code of the failure
     * (`too_few_parts`, `invalid_ms`, ... as in `tests/vectors/hlc.json`).
     */
    static parse(text) {
        return native.hlcParse(text);
    }
    /** `Hlc.compare(a, b)`, for `versions.sort(Hlc.compare)`: -1, 0 or 1. */
    static compare(a, b) {
        return native.hlcCompare(hlc('a', a), hlc('b', b));
    }
    /** Wall-clock milliseconds since the Unix epoch. */
    get ms() {
        return this.#ms;
    }
    /** Logical counter within the millisecond. */
    get counter() {
        return this.#counter;
    }
    /** The node that produced the value (`StateStore` for the local server, a client id...). */
    get nodeId() {
        return this.#nodeId;
    }
    /** -1, 0 or 1 as this value is lower than, equal to or greater than `other`. */
    compare(other) {
        return native.hlcCompare(this, hlc('other', other));
    }
    /** True if both are the same value (padding does not matter). */
    equals(other) {
        return this.compare(other) === 0;
    }
    /** The wire form: `ms` padded to 15 digits, `counter` to 5 (`001696374425000:00000:CLIENT`). */
    toString() {
        return native.hlcFormat(this);
    }
    /** The wire form, so that `JSON.stringify` writes versions as strings. */
    toJSON() {
        return this.toString();
    }
}
exports.Hlc = Hlc;
// Set while the factory builds a version from parts the core made (and so checked).
let fromCore = false;
native.hlcClass((ms, counter, nodeId) => {
    fromCore = true;
    try {
        return new Hlc(ms, counter, nodeId);
    }
    finally {
        fromCore = false;
    }
});
// `console.log(version)` shows the wire form.
Object.defineProperty(Hlc.prototype, Symbol.for('nodejs.util.inspect.custom'), {
    value() {
        return `Hlc(${this.toString()})`;
    },
});
function hlc(name, v) {
    if (v instanceof Hlc)
        return v;
    throw invalid(`${name} must be an Hlc, got ${describe(v)}`);
}
/** True for the errors of this package (an `Error` with one of the {@link ErrorCode}s). */
function isMqstateError(e) {
    if (!(e instanceof Error))
        return false;
    const code = e.code;
    return typeof code === 'string' && CODES.has(code);
}
const CODES = new Set([
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
function invalid(message) {
    return native.invalidArgumentError(message);
}
function checkBytes(name, v) {
    if (typeof v !== 'string' && !(v instanceof Uint8Array)) {
        throw invalid(`${name} must be a string, a Buffer or a Uint8Array, got ${describe(v)}`);
    }
}
function describe(v) {
    return v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v;
}
function token(t) {
    if (t === undefined || t instanceof Hlc)
        return t;
    if (typeof t === 'string')
        return Hlc.parse(t);
    throw invalid(`fencingToken must be an Hlc or its string form, got ${describe(t)}`);
}
function abortError(signal) {
    const e = new Error('The operation was aborted', { cause: signal.reason });
    e.name = 'AbortError';
    e.code = 'ABORT_ERR';
    return e;
}
/**
 * Runs a native call with an optional `AbortSignal`: on abort the returned promise rejects
 * at once with an `AbortError` and the native call is cancelled (its request withdrawn).
 */
function withSignal(signal, start) {
    if (signal === undefined)
        return start(undefined);
    if (signal.aborted)
        return Promise.reject(abortError(signal));
    const cancel = new native.CancelToken();
    return new Promise((resolve, reject) => {
        const onAbort = () => {
            cancel.cancel();
            reject(abortError(signal));
        };
        signal.addEventListener('abort', onAbort, { once: true });
        start(cancel).then((v) => {
            signal.removeEventListener('abort', onAbort);
            resolve(v);
        }, (e) => {
            signal.removeEventListener('abort', onAbort);
            reject(e);
        });
    });
}
/** Runs `f`, turning a synchronous throw (a bad argument) into a rejected promise. */
function guarded(f) {
    try {
        return f();
    }
    catch (e) {
        return Promise.reject(e);
    }
}
/** The native client of a {@link Client} (for the lease, lock and election classes). */
let nativeOf;
function nativeClient(c) {
    if (!(c instanceof Client))
        throw invalid(`client must be a Client, got ${describe(c)}`);
    return nativeOf(c);
}
/**
 * A state store client: one MQTT5 connection, any number of concurrent calls (they are
 * pipelined). Every method returns a Promise. Keys and values are strings, Buffers or
 * Uint8Arrays; values come back as Buffers.
 */
class Client {
    #native;
    static {
        nativeOf = (c) => c.#native;
    }
    constructor(n) {
        this.#native = n;
    }
    /**
     * Connects to a broker: `Client.connect('mqtt://host:port')`, or with options
     * (`{ host, port, clientId, tls, timeoutMs, ... }`, or `{ url, ...overrides }`). Resolves
     * once connected and subscribed.
     */
    static connect(options = {}) {
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
    static fromEnv(env = process.env) {
        return guarded(() => {
            const vars = {};
            for (const [k, v] of Object.entries(env)) {
                if (k.startsWith('AIO_') && typeof v === 'string')
                    vars[k] = v;
            }
            return native.NativeClient.fromEnv(vars).then((n) => new Client(n));
        });
    }
    /** The MQTT client id (generated when none was given). */
    get clientId() {
        return this.#native.clientId;
    }
    /** The connection's state now. */
    get state() {
        return this.#native.state;
    }
    /** `GET`: the value and its version, or `null` when there is no such key. */
    get(key, options) {
        return guarded(() => {
            checkBytes('key', key);
            if (options === undefined)
                return this.#native.get(key);
            return withSignal(options.signal, (c) => this.#native.get(key, options.timeoutMs, c));
        });
    }
    /**
     * `SET`: writes the value. With `nx` / `nex`, `applied` says whether the condition held;
     * `expiryMs` makes the key expire; `fencingToken` writes a key protected by a lock.
     */
    set(key, value, options) {
        return guarded(() => {
            checkBytes('key', key);
            checkBytes('value', value);
            if (options === undefined)
                return this.#native.set(key, value);
            const o = options;
            const ft = token(o.fencingToken);
            return withSignal(o.signal, (c) => this.#native.set(key, value, o.nx, o.nex, o.expiryMs, ft, o.timeoutMs, c, o.persist));
        });
    }
    /** `DEL`: the number of keys deleted (0 or 1). */
    del(key, options) {
        return guarded(() => {
            checkBytes('key', key);
            if (options === undefined)
                return this.#native.del(key);
            const o = options;
            const ft = token(o.fencingToken);
            return withSignal(o.signal, (c) => this.#native.del(key, ft, o.timeoutMs, c));
        });
    }
    /** `VDEL`: deletes the key only if it holds `value`. */
    vdel(key, value, options) {
        return guarded(() => {
            checkBytes('key', key);
            checkBytes('value', value);
            const o = options ?? {};
            const ft = token(o.fencingToken);
            return withSignal(o.signal, (c) => this.#native.vdel(key, value, ft, o.timeoutMs, c));
        });
    }
    /**
     * Observes a key: an async iterator of its changes, registered with the server at once
     * (`await observation.ready` to know it is). `break` out of `for await` (or `close()`) to
     * stop observing. `signal` ends the iteration with an `AbortError`.
     */
    observe(key, options = {}) {
        let start;
        try {
            checkBytes('key', key);
            start = withSignal(options.signal, (c) => this.#native.observe(key, options.timeoutMs, c));
        }
        catch (e) {
            start = Promise.reject(e);
        }
        return new Observation(start, options.signal);
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
    scan(pattern, options = {}) {
        checkBytes('pattern', pattern);
        return new Scan(this.#native.scan(pattern, options.timeoutMs), options.signal);
    }
    /** Stops observing a key: every observation of it on this client ends. */
    unobserve(key, options = {}) {
        return guarded(() => {
            checkBytes('key', key);
            return withSignal(options.signal, (c) => this.#native.unobserve(key, options.timeoutMs, c));
        });
    }
    /**
     * Closes the connection and waits for it: pending calls reject with `ERR_DISCONNECTED`,
     * observations end, later calls fail. Idempotent. Node can exit afterwards.
     */
    close() {
        return this.#native.close();
    }
    /** Requests waiting for a response (diagnostics). */
    get requestsInFlight() {
        return this.#native.requestsInFlight;
    }
    /** Keys registered for notifications on this client (diagnostics). */
    get observedKeys() {
        return this.#native.observedKeys;
    }
}
exports.Client = Client;
const DONE = Object.freeze({ done: true, value: undefined });
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
class EventStream {
    #start;
    #native;
    #closed = false;
    #signal;
    /** @internal */
    constructor(start, signal) {
        this.#start = start;
        this.#signal = signal;
        start.then((n) => {
            if (this.#closed)
                n.close();
            else
                this.#native = n;
        }, () => {
            // Reported by the first `next()` (and by `ready`).
        });
        signal?.addEventListener('abort', () => this.close(), { once: true });
    }
    /** Resolves once the stream is set up (for an observation: the server registered the
     * key); rejects if it could not be. */
    get ready() {
        return this.#start.then(() => undefined);
    }
    async next() {
        if (this.#closed)
            return this.#end();
        let n;
        try {
            n = await this.#start;
        }
        catch (e) {
            // The set-up failed: thrown once, then the stream is done.
            this.#closed = true;
            throw e;
        }
        if (this.#closed)
            return this.#end();
        // An error (ERR_LAGGED: notifications were dropped) is thrown and the stream goes on,
        // as in every language: the core ends a stream by returning null, never by an error.
        const item = await n.next();
        if (item === null) {
            this.close();
            return this.#end();
        }
        return { done: false, value: item };
    }
    #end() {
        if (this.#signal?.aborted)
            throw abortError(this.#signal);
        return DONE;
    }
    /** Called by `break` in `for await`: closes the stream. */
    async return() {
        this.close();
        return DONE;
    }
    /** Closes the stream now (a pending `next()` resolves as done). Idempotent. */
    close() {
        this.#closed = true;
        this.#native?.close();
    }
    [Symbol.asyncIterator]() {
        return this;
    }
}
exports.EventStream = EventStream;
/**
 * The changes of one key ({@link Client.observe}). `break` (or `close()`) unobserves the key
 * (when no other observation of it is open). An `ERR_LAGGED` error means notifications were
 * dropped because they were not read fast enough: `get` the key to resynchronise; the
 * observation goes on (call `next()` again).
 */
class Observation extends EventStream {
}
exports.Observation = Observation;
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
class Scan {
    #native;
    #signal;
    /** Keys of the last page that the iteration has not yielded yet, in reverse order. */
    #unread = [];
    /** @internal */
    constructor(n, signal) {
        this.#native = n;
        this.#signal = signal;
    }
    /** The pattern being listed. */
    get pattern() {
        return this.#native.pattern;
    }
    /** True once the last page has been received: `nextPage()` then resolves with `null`. */
    get done() {
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
    nextPage() {
        if (this.#unread.length > 0) {
            const rest = this.#unread.reverse();
            this.#unread = [];
            return Promise.resolve(rest);
        }
        return withSignal(this.#signal, (c) => this.#native.nextPage(c));
    }
    /** The keys, one at a time, asking for each page when the one before has been read. */
    async *keys() {
        for (;;) {
            const key = this.#unread.pop();
            if (key !== undefined) {
                yield key;
                continue;
            }
            const page = await this.nextPage();
            if (page === null)
                return;
            this.#unread = page.reverse();
        }
    }
    [Symbol.asyncIterator]() {
        return this.keys();
    }
}
exports.Scan = Scan;
function checkMs(name, v) {
    if (typeof v !== 'number')
        throw invalid(`${name} must be a number of milliseconds, got ${describe(v)}`);
}
function sessionOf(options) {
    const session = options?.sessionId;
    if (session !== undefined)
        checkBytes('sessionId', session);
    return session;
}
/**
 * A lease on a key: at most one holder at a time, for a ttl the holder renews. The fencing
 * token (an {@link Hlc}) of each acquire or renewal protects writes (`fencingToken` of
 * `set` / `del` / `vdel`): the server refuses a write with an older token.
 */
class Lease {
    #native;
    /** A lease on key `name`, held as `holder`. Nothing is sent until `acquire`. */
    constructor(client, name, holder, options) {
        const c = nativeClient(client);
        checkBytes('name', name);
        checkBytes('holder', holder);
        this.#native = new native.NativeLease(c, name, holder, sessionOf(options));
    }
    /** The lease's key. */
    get name() {
        return this.#native.name;
    }
    /** The value written while holding the lease (`holder`, or `holder:sessionId`). */
    get holderValue() {
        return this.#native.holderValue;
    }
    /** The token of the last acquire or renewal while the lease is believed held, or null. */
    get currentToken() {
        return this.#native.currentToken;
    }
    /** Tries once: the fencing token when held (acquiring a held lease renews it), or null
     * when someone else holds it. */
    acquire(ttlMs, options = {}) {
        return guarded(() => {
            checkMs('ttlMs', ttlMs);
            return withSignal(options.signal, (c) => this.#native.acquire(ttlMs, c));
        });
    }
    /** Acquires, waiting up to `timeoutMs` for the holder to release it or for its lease to
     * expire (woken by the release's notification, no polling); `ERR_TIMEOUT` otherwise. */
    acquireWait(ttlMs, timeoutMs, options = {}) {
        return guarded(() => {
            checkMs('ttlMs', ttlMs);
            checkMs('timeoutMs', timeoutMs);
            return withSignal(options.signal, (c) => this.#native.acquireWait(ttlMs, timeoutMs, c));
        });
    }
    /** Renews with the last ttl: the new (greater) token, or null if the lease was lost. */
    renew(options = {}) {
        return withSignal(options.signal, (c) => this.#native.renew(c));
    }
    /** Renews in the background every `fraction` x ttl (default 0.5) until a renewal fails
     * (a `lost` event), `stopRenewal()` or `release()`. Needs an acquired lease. Keeps no
     * handle on Node's event loop. */
    autoRenew(fraction) {
        this.#native.autoRenew(fraction);
    }
    /** Stops the automatic renewal (the lease stays held until its ttl passes). */
    stopRenewal() {
        this.#native.stopRenewal();
    }
    /** Gives the lease up: true if this holder held it. */
    release(options = {}) {
        return withSignal(options.signal, (c) => this.#native.release(c));
    }
    /** Who holds the lease now, or null. */
    holder(options = {}) {
        return withSignal(options.signal, (c) => this.#native.holder(c));
    }
    /** The lease's events from now on, as an async iterator. */
    events() {
        return new EventStream(Promise.resolve(this.#native.events()));
    }
}
exports.Lease = Lease;
/**
 * A held {@link Lock}: `token` fences the writes it protects. `unlock()` releases it; a
 * guard that is dropped instead lets the lock expire after its ttl.
 */
class LockGuard {
    #native;
    /** The fencing token to pass with every write the lock protects. */
    token;
    /** @internal */
    constructor(n) {
        this.#native = n;
        this.token = n.token;
    }
    /** Releases the lock: true if it was still held by us (false on a second call). */
    unlock() {
        return this.#native.unlock();
    }
}
exports.LockGuard = LockGuard;
/**
 * A lock: a lease used as a mutex. Mutual exclusion is between holders: give every
 * concurrent user its own holder (or `sessionId`).
 */
class Lock {
    #native;
    /** The lock `name`, taken as `holder`. */
    constructor(client, name, holder, options) {
        const c = nativeClient(client);
        checkBytes('name', name);
        checkBytes('holder', holder);
        this.#native = new native.NativeLock(c, name, holder, sessionOf(options));
    }
    /** The lock's key. */
    get name() {
        return this.#native.name;
    }
    /** The value written while holding the lock. */
    get holderValue() {
        return this.#native.holderValue;
    }
    /** Takes the lock for `ttlMs`, waiting up to `timeoutMs` for it (`ERR_TIMEOUT` then). */
    lock(ttlMs, timeoutMs, options = {}) {
        return guarded(() => {
            checkMs('ttlMs', ttlMs);
            checkMs('timeoutMs', timeoutMs);
            return withSignal(options.signal, (c) => this.#native.lock(ttlMs, timeoutMs, c)).then((g) => new LockGuard(g));
        });
    }
    /** Who holds the lock now, or null. */
    holder(options = {}) {
        return withSignal(options.signal, (c) => this.#native.holder(c));
    }
    /**
     * Runs `f(token)` under the lock and unlocks afterwards (also when `f` throws). Resolves
     * with what `f` resolved with.
     */
    async withLock(ttlMs, timeoutMs, f, options = {}) {
        const guard = await this.lock(ttlMs, timeoutMs, options);
        try {
            return await f(guard.token);
        }
        finally {
            await guard.unlock();
        }
    }
    /**
     * A fenced read-modify-write under the lock: gets `key`, calls `f` with its value (or
     * null), then sets the value `f` returned (or deletes the key for `null`) with the lock's
     * fencing token, and unlocks. Resolves with the new value.
     */
    async edit(key, ttlMs, timeoutMs, f) {
        checkBytes('key', key);
        checkMs('ttlMs', ttlMs);
        checkMs('timeoutMs', timeoutMs);
        // The core runs the edit (Lock::edit_async) and holds the lock meanwhile; this side only
        // computes the new value.
        const edit = await this.#native.editStart(key, ttlMs, timeoutMs);
        let value;
        try {
            value = await f(edit.old);
            if (value !== null)
                checkBytes('the value returned by f', value);
        }
        catch (e) {
            await edit.abandon();
            throw e;
        }
        return edit.finish(value);
    }
}
exports.Lock = Lock;
/**
 * A candidate in a leader election: the leader holds the election's key (a lease) and
 * renews it automatically; the others wait for it.
 */
class LeaderElection {
    #native;
    /** Candidate `candidate` in the election whose key is `election`. */
    constructor(client, election, candidate, options = {}) {
        const c = nativeClient(client);
        checkBytes('election', election);
        checkBytes('candidate', candidate);
        this.#native = new native.NativeLeaderElection(c, election, candidate, options.renewFraction);
    }
    /** Campaigns until elected (resolves with the fencing token) or `timeoutMs` passes
     * (`ERR_TIMEOUT`). The term is then renewed automatically until `resign()` or a loss. */
    campaign(termMs, timeoutMs, options = {}) {
        return guarded(() => {
            checkMs('termMs', termMs);
            checkMs('timeoutMs', timeoutMs);
            return withSignal(options.signal, (c) => this.#native.campaign(termMs, timeoutMs, c));
        });
    }
    /** Tries once: the fencing token if elected, else null. */
    tryCampaign(termMs, options = {}) {
        return guarded(() => {
            checkMs('termMs', termMs);
            return withSignal(options.signal, (c) => this.#native.tryCampaign(termMs, c));
        });
    }
    /** Steps down if leading: true if this candidate held the election key. */
    resign(options = {}) {
        return withSignal(options.signal, (c) => this.#native.resign(c));
    }
    /** The current leader, or null. */
    leader(options = {}) {
        return withSignal(options.signal, (c) => this.#native.leader(c));
    }
    /** True while this candidate believes it leads. */
    get isLeader() {
        return this.#native.isLeader;
    }
    /** The fencing token of the current term, while leading. */
    get currentToken() {
        return this.#native.currentToken;
    }
    /** The leadership changes from now on (`await events.ready` to know the election key is
     * observed). */
    events() {
        return new EventStream(this.#native.events());
    }
}
exports.LeaderElection = LeaderElection;
/** The GETs per second of the Rust client, `depth` in flight (for the benchmark). Only in a
 * build with the `testing` cargo feature. */
function benchRustGet(url, n, depth) {
    if (native.benchRustGet === undefined)
        return Promise.reject(missingTestTooling('benchRustGet'));
    return native.benchRustGet(url, n, depth);
}
// ---------------------------------------------------------------------------------------
// IoT Hub device client (mqstate::iothub)
// ---------------------------------------------------------------------------------------
/** The local IoT Hub in this process, for tests. Only in a build with the `testing` cargo
 * feature. */
exports.LocalIotHub = testTooling('LocalIotHub', native.LocalIotHub);
/**
 * A received cloud-to-device message. Nothing is settled until the application says so:
 * `await msg.complete()`, or over AMQP `msg.reject()` (the hub dead-letters it) or
 * `msg.abandon()` (the hub delivers it again). Over MQTT completions are acknowledged in
 * arrival order, and `reject()` and `abandon()` reject with `ERR_NOT_SUPPORTED` (IoT Hub has
 * neither over MQTT). A settlement the hub can no longer take (the message's connection was
 * lost, or the hub delivered it again) rejects with `ERR_LOCK_LOST`.
 */
class C2dMessage {
    native;
    /** @internal */
    constructor(native) {
        this.native = native;
    }
    get payload() {
        return this.native.payload;
    }
    get messageId() {
        return this.native.messageId;
    }
    get correlationId() {
        return this.native.correlationId;
    }
    get userId() {
        return this.native.userId;
    }
    get to() {
        return this.native.to;
    }
    get expiryTime() {
        return this.native.expiryTime;
    }
    get contentType() {
        return this.native.contentType;
    }
    get contentEncoding() {
        return this.native.contentEncoding;
    }
    get ack() {
        return this.native.ack;
    }
    /** Application properties in order; `value` is `null` for a null property, `''` for an empty one. */
    get properties() {
        return this.native.properties;
    }
    /** True when the message was delivered before (at-least-once delivery). */
    get isRedelivery() {
        return this.native.isRedelivery;
    }
    /** Over AMQP, how many times the hub delivered the message before (0 the first time, one
     * more after each abandon or lost lock); `null` over MQTT. */
    get deliveryCount() {
        return this.native.deliveryCount;
    }
    /** Completes the message (over MQTT its PUBACK goes out in arrival order; over AMQP it is
     * settled on its own): the hub's feedback says `Success`. */
    async complete() {
        this.native.complete();
    }
    /** Rejects the message over AMQP: the hub dead-letters it (feedback `Rejected`). Rejects
     * with `ERR_NOT_SUPPORTED` over MQTT. */
    async reject() {
        this.native.reject();
    }
    /** Abandons the message over AMQP: the hub delivers it again (`deliveryCount` + 1), or
     * dead-letters it once it was delivered its maximum number of times (feedback
     * `DeliveryCountExceeded`). Rejects with `ERR_NOT_SUPPORTED` over MQTT. */
    async abandon() {
        this.native.abandon();
    }
}
exports.C2dMessage = C2dMessage;
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
class DeviceClient {
    native;
    constructor(native) {
        this.native = native;
    }
    /** Connects (resolves once subscribed to the device's C2D messages). A mistake in the
     * options (an unknown transport, `certFile` without `keyFile`, `tls: false` with a TLS
     * file...) rejects with `ERR_INVALID_ARGUMENT` before any connection is tried. */
    static async connect(connectionString, options) {
        return new DeviceClient(await native.NativeDeviceClient.connect(connectionString, options));
    }
    get deviceId() {
        return this.native.deviceId;
    }
    get state() {
        return this.native.state;
    }
    /** Counters of the client's life (received, redelivered, acknowledged, rejected, abandoned,
     * tokenRenewals...). */
    get stats() {
        return this.native.stats;
    }
    async receive(timeoutMs) {
        const m = await this.native.receive(timeoutMs);
        return m == null ? null : new C2dMessage(m);
    }
    /** The messages until the client is closed (then the iteration ends). */
    async *messages() {
        for (;;) {
            let msg;
            try {
                msg = await this.receive();
            }
            catch (e) {
                if (e.code === 'ERR_DISCONNECTED' && this.state === 'closed') {
                    return;
                }
                throw e;
            }
            yield msg;
        }
    }
    [Symbol.asyncIterator]() {
        return this.messages();
    }
    /** Sends telemetry; resolves on the hub's PUBACK. */
    sendEvent(payload, options = {}) {
        return this.native.sendEvent(payload, options.properties, options.messageId, options.contentType);
    }
    /** Disconnects; uncompleted messages stay in the hub's queue. */
    close() {
        return this.native.close();
    }
}
exports.DeviceClient = DeviceClient;
