// Compiled (never run) by scripts/test-node with `tsc --noEmit -p test/tsconfig.json`: the
// checked-in typings describe the API as documented. A mistake here fails the test script.
import {
  C2dMessage,
  Client,
  DeviceClient,
  Hlc,
  LeaderElection,
  Lease,
  LocalIotHub,
  LocalServer,
  Lock,
  Scan,
  isMqstateError,
  type DeviceConnectOptions,
  type DeviceStats,
  type LeaseEvent,
  type LeadershipEvent,
  type MqstateError,
  type Notification,
  type SetOutcome,
  type SetResult,
  type VdelOutcome,
} from '../index.js';

export async function typed(): Promise<void> {
  const server: LocalServer = await LocalServer.start({ maxKeys: 10 });
  const client: Client = await Client.connect(server.url);
  const other: Client = await Client.connect({ host: server.host, port: server.port, timeoutMs: 5000 });
  const fromEnv: Promise<Client> = Client.fromEnv({ AIO_BROKER_HOSTNAME: 'h' });
  void fromEnv.catch(() => undefined);

  const set: SetOutcome = await client.set('k', Buffer.from([1]), {
    nx: true,
    expiryMs: 1000,
    fencingToken: '1:0:n',
    persist: true,
    signal: AbortSignal.timeout(1000),
  });
  const durable: LocalServer = await LocalServer.start({ dataDir: '/tmp/x', persist: 'requested' });
  void durable;
  const got = await client.get(new Uint8Array([107]));
  if (got !== null) {
    const value: Buffer = got.value;
    const order: number = got.version.compare(set.version);
    void [value, order, Hlc.compare(got.version, set.version), got.version.ms + 1n];
  }
  const fields: { applied: boolean; version: Hlc } = set;
  const old: SetResult = set; // the deprecated alias still compiles
  void [fields, old];
  const deleted: number = await client.del('k', { fencingToken: set.version });
  const outcome: VdelOutcome = await client.vdel('k', 'v');
  void [deleted, outcome];

  for await (const n of client.observe('k')) {
    const change: Notification = n;
    const op: 'set' | 'delete' = change.operation;
    const value: Buffer | undefined = change.value;
    void [op, value];
    break;
  }

  for await (const key of client.scan('line3/*')) {
    const k: Buffer = key;
    void k;
    break;
  }
  const scan: Scan = client.scan(Buffer.from([0x6b, 0xff, 0x2a]), { timeoutMs: 1000, signal: AbortSignal.timeout(5000) });
  const page: Buffer[] | null = await scan.nextPage();
  const scanDone: boolean = scan.done;
  const scanPattern: Buffer = scan.pattern;
  const scanKeys: AsyncGenerator<Buffer, void, undefined> = scan.keys();
  void [page, scanDone, scanPattern, scanKeys];

  const lease = new Lease(client, 'lease', 'me', { sessionId: 's' });
  const token: Hlc | null = await lease.acquire(1000);
  for await (const e of lease.events()) {
    const ev: LeaseEvent = e;
    if (ev.type === 'lost') {
      const reason: string = ev.reason;
      void reason;
    } else if (ev.type === 'acquired') {
      const t: Hlc = ev.token;
      void t;
    }
    break;
  }
  lease.autoRenew(0.5);
  void token;

  const guard = await new Lock(client, 'lock', 'me').lock(1000, 1000);
  const unlocked: boolean = await guard.unlock();
  const edited: Buffer | null = await new Lock(client, 'lock', 'me').edit('c', 1000, 1000, (old) =>
    old === null ? '1' : null,
  );
  void [unlocked, edited];

  const election = new LeaderElection(other, 'e', 'c', { renewFraction: 0.5 });
  const term: Hlc = await election.campaign(1000, 1000);
  for await (const e of election.events()) {
    const ev: LeadershipEvent = e;
    if (ev.type === 'newLeader') {
      const leader: Buffer | null = ev.leader;
      void leader;
    }
    break;
  }
  const leading: boolean = election.isLeader;
  void [term, leading];

  try {
    await client.get('k');
  } catch (e) {
    if (isMqstateError(e)) {
      const err: MqstateError = e;
      const code: string = err.code;
      void [code, err.serviceKind];
    }
  }
  await Promise.all([client.close(), other.close()]);
  await server.shutdown();
}

// The IoT Hub device client: every connection option, AMQP settlement and deliveryCount, the
// test hub's AMQP, feedback and X.509 calls.
export async function typedIotHub(): Promise<void> {
  const hub: LocalIotHub = await LocalIotHub.start(2000, { maxDeliveryCount: 2 });
  const tlsHub: LocalIotHub = await LocalIotHub.start(undefined, { deviceTls: true });
  const amqpPort: number = hub.amqpPort;
  const httpsPort: number = hub.httpsPort;
  const caPem: string | null = hub.caPem;
  const options: DeviceConnectOptions = {
    transport: 'amqp',
    host: '127.0.0.1',
    port: amqpPort,
    tls: true,
    caFile: '/tmp/hub-ca.pem',
    tokenLifetimeMs: 60_000,
    keepAliveMs: 30_000,
    connectTimeoutMs: 5_000,
    operationTimeoutMs: 5_000,
    receiveBuffer: 8,
  };
  const mqtt: DeviceConnectOptions = { transport: 'mqtt' };
  const later: DeviceConnectOptions = { transport: 'amqp-ws', port: httpsPort };
  const device: DeviceClient = await DeviceClient.connect(hub.addDevice('d'), options);
  const msg: C2dMessage | null = await device.receive(1000);
  if (msg !== null) {
    const count: number | null = msg.deliveryCount;
    const settled: Promise<void> = count === 0 ? msg.abandon() : msg.reject();
    await settled;
    await msg.complete();
  }
  const stats: DeviceStats = device.stats;
  const settlements: number = stats.acknowledged + stats.rejected + stats.abandoned;
  const feedback: string | null = hub.feedback('m1');
  const dead: number = hub.deadLettered('d');
  const cs: string = tlsHub.addX509Device('x1', 'AB:CD');
  const x509: DeviceClient = await DeviceClient.connect(cs, {
    host: 'localhost',
    port: tlsHub.port,
    caFile: '/tmp/hub-ca.pem',
    certFile: '/tmp/x1.pem',
    keyFile: '/tmp/x1.key',
  });
  void [caPem, mqtt, later, settlements, feedback, dead];
  await Promise.all([device.close(), x509.close()]);
  await Promise.all([hub.stop(), tlsHub.stop()]);
}
