// Install test (scripts/test-install): copied into an empty npm project where only the
// package tarball from dist/ was installed (`npm install mqstate-VERSION.tgz`). Sets a key and
// reads it back, and checks that the package holds the clients only: `LocalServer` (the
// in-process test server of a `testing` build) throws an error that says what to do instead.
//
//   node set_get.mjs mqtt://127.0.0.1:PORT KEY
import { createRequire } from 'node:module';
import { Client, LocalServer } from 'mqstate';

const [url, key] = process.argv.slice(2);
const expected = 'set from Node';
const where = createRequire(import.meta.url).resolve('mqstate');
const client = await Client.connect(url);
try {
  await client.set(key, expected);
  const got = await client.get(key);
  const text = got?.value.toString();
  console.log(`Node: mqstate from ${where}: set ${key}, got ${JSON.stringify(text)}`);
  if (text !== expected) {
    console.error(`Node: expected ${JSON.stringify(expected)}`);
    process.exitCode = 1;
  }
} finally {
  await client.close();
}
try {
  await LocalServer.start();
  console.error('Node: the package has LocalServer (the test server): it must hold the clients only');
  process.exitCode = 1;
} catch (e) {
  if (e.code !== 'ERR_NOT_SUPPORTED' || !e.message.includes('mqstate serve')) {
    console.error(`Node: LocalServer's error does not say what to do: ${e.code} ${e.message}`);
    process.exitCode = 1;
  } else {
    console.log('Node: LocalServer is not in the package (ERR_NOT_SUPPORTED naming `mqstate serve`)');
  }
}
