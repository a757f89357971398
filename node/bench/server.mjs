// The benchmark's server, in its own process: prints its URL, stops when stdin closes.
import { LocalServer } from '../index.js';

const server = await LocalServer.start();
process.stdout.write(`${server.url}\n`);
process.stdin.resume();
process.stdin.on('end', () => server.shutdown().then(() => process.exit(0)));
