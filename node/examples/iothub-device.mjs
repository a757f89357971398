// A device that prints each cloud-to-device message and completes it.
//
//   mqstate serve --iothub-device dev1
//   node node/examples/iothub-device.mjs "HostName=...;DeviceId=dev1;SharedAccessKey=..." 127.0.0.1 8883
//   mqstate iothub send dev1 hello -P colour=blue
//
// With a host and port it connects there over plain TCP (the local hub's default endpoint).
import { DeviceClient } from '../index.js';

const [cs, host, port] = process.argv.slice(2);
if (!cs) {
  console.error('usage: iothub-device.mjs CONNECTION_STRING [HOST PORT]');
  process.exit(2);
}
const options = host ? { host, port: Number(port), tls: false } : {};
const device = await DeviceClient.connect(cs, options);
console.log(`connected as ${device.deviceId}; waiting for messages`);
process.on('SIGINT', () => device.close());
for await (const msg of device) {
  const flag = msg.isRedelivery ? ' (redelivery)' : '';
  console.log(`message ${msg.messageId}${flag}: ${msg.payload.toString()}`, msg.properties);
  await msg.complete();
}
