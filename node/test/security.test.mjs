// The TLS and user name/password options against a secured local server (a TLS listener with
// a CA generated for it, and a password file with one user).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, LocalServer } from '../index.js';

test('connects over TLS with a user name and password', async () => {
  const server = await LocalServer.start({ username: 'alice', password: 's3cret' });
  try {
    assert.ok(server.tlsUrl?.startsWith('mqtts://localhost:'));
    const client = await Client.connect({
      url: server.tlsUrl,
      tls: { caFile: server.caFile },
      username: 'alice',
      password: 's3cret',
    });
    try {
      await client.set('secured', 'yes');
      const got = await client.get('secured');
      assert.equal(got.value.toString(), 'yes');
    } finally {
      await client.close();
    }
    await assert.rejects(
      Client.connect({
        url: server.tlsUrl,
        tls: { caFile: server.caFile },
        username: 'alice',
        password: 'wrong',
        connectTimeoutMs: 5000,
      }),
      (e) => e instanceof Error && typeof e.code === 'string',
    );
  } finally {
    await server.shutdown();
  }
});
