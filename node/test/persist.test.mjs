// Persistence from Node: `persist: true` on SET, and `LocalServer.start({ dataDir })`
// restarted on the same directory finds the keys with their versions.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, LocalServer } from '../index.js';

describe('persistence', () => {
  it('a restarted LocalServer on the same dataDir has the persisted keys only', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mqstate-node-persist-'));
    try {
      let server = await LocalServer.start({ dataDir: dir, persist: 'requested' });
      let c = await Client.connect(server.url);
      const kept = await c.set('kept', 'v', { persist: true });
      await c.set('memory-only', 'v');
      await c.close();
      await server.shutdown();

      server = await LocalServer.start({ dataDir: dir, persist: 'requested' });
      c = await Client.connect(server.url);
      const got = await c.get('kept');
      assert.equal(got.value.toString(), 'v');
      assert.ok(got.version.equals(kept.version));
      assert.equal(await c.get('memory-only'), null);
      await c.close();
      await server.shutdown();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a bad persist mode, or persist without dataDir, is ERR_INVALID_ARGUMENT', async () => {
    await assert.rejects(LocalServer.start({ dataDir: os.tmpdir(), persist: 'sometimes' }), (e) => {
      assert.equal(e.code, 'ERR_INVALID_ARGUMENT');
      assert.match(e.message, /persist/);
      return true;
    });
    await assert.rejects(LocalServer.start({ persist: 'all' }), (e) => {
      assert.equal(e.code, 'ERR_INVALID_ARGUMENT');
      return true;
    });
  });
});
