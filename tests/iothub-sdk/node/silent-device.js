'use strict';
// A device that receives cloud-to-device messages and never acknowledges them: a minimal MQTT
// 3.1.1 client over TLS that sends no PUBACK. The official device SDKs cannot do that (their MQTT
// transports PUBACK every message as it arrives), and the DeliveryCountExceeded feedback needs it.

const tls = require('node:tls');
const fs = require('node:fs');
const { SharedAccessSignature } = require('azure-iot-common');

function str(s) {
    const b = Buffer.from(s, 'utf8');
    const len = Buffer.alloc(2);
    len.writeUInt16BE(b.length);
    return Buffer.concat([len, b]);
}

function packet(type, body) {
    const lenBytes = [];
    let n = body.length;
    do {
        let byte = n % 128;
        n = Math.floor(n / 128);
        if (n > 0) byte |= 0x80;
        lenBytes.push(byte);
    } while (n > 0);
    return Buffer.concat([Buffer.from([type, ...lenBytes]), body]);
}

/**
 * Connects device `deviceId` (key `key`) to `hub` (from hub.js), subscribes to its C2D topic and
 * collects the PUBLISHes it gets in `device.received` ({topic, payload}); `close()` disconnects.
 */
function connectSilentDevice(hub, deviceId, key) {
    return new Promise((resolve, reject) => {
        const expiry = Math.floor(Date.now() / 1000) + 3600;
        const sas = SharedAccessSignature.create(`${hub.hostName}/devices/${deviceId}`, null, key, expiry).toString();
        const connect = packet(0x10, Buffer.concat([
            str('MQTT'), Buffer.from([4, 0xc2, 0, 60]), // 3.1.1; user name, password, clean session
            str(deviceId), str(`${hub.hostName}/${deviceId}/?api-version=2021-04-12`), str(sas),
        ]));
        const socket = tls.connect({ host: '127.0.0.1', port: hub.ports.mqtts, servername: hub.hostName, ca: fs.readFileSync(hub.caFile) });
        const device = {
            received: [],
            waiters: [],
            close() {
                socket.end(Buffer.from([0xe0, 0]));
                socket.destroy();
            },
            /** Resolves with the next PUBLISH (or one already received and not yet taken). */
            next(timeoutMs = 10000) {
                if (device.received.length > device.taken) return Promise.resolve(device.received[device.taken++]);
                return new Promise((res, rej) => {
                    const timer = setTimeout(() => rej(new Error(`silent device ${deviceId}: no message within ${timeoutMs} ms`)), timeoutMs);
                    device.waiters.push(() => { clearTimeout(timer); res(device.received[device.taken++]); });
                });
            },
            taken: 0,
        };
        let buffer = Buffer.alloc(0);
        let subscribed = false;
        socket.once('secureConnect', () => socket.write(connect));
        socket.on('error', (err) => { if (!subscribed) reject(err); });
        socket.on('close', () => { if (!subscribed) reject(new Error(`silent device ${deviceId}: connection closed before SUBACK`)); });
        socket.on('data', (chunk) => {
            buffer = Buffer.concat([buffer, chunk]);
            for (;;) {
                if (buffer.length < 2) return;
                let len = 0, mult = 1, i = 1, byte;
                do {
                    if (i >= buffer.length) return;
                    byte = buffer[i++];
                    len += (byte & 0x7f) * mult;
                    mult *= 128;
                } while (byte & 0x80);
                if (buffer.length < i + len) return;
                const type = buffer[0];
                const body = buffer.subarray(i, i + len);
                buffer = buffer.subarray(i + len);
                if ((type & 0xf0) === 0x20) { // CONNACK
                    if (body[1] !== 0) {
                        reject(new Error(`silent device ${deviceId}: CONNACK ${body[1]}`));
                        socket.destroy();
                        return;
                    }
                    const filter = `devices/${deviceId}/messages/devicebound/#`;
                    socket.write(packet(0x82, Buffer.concat([Buffer.from([0, 1]), str(filter), Buffer.from([1])])));
                } else if ((type & 0xf0) === 0x90) { // SUBACK
                    subscribed = true;
                    if (body[2] !== 1) reject(new Error(`silent device ${deviceId}: SUBACK ${body[2]}`));
                    else resolve(device);
                } else if ((type & 0xf0) === 0x30) { // PUBLISH: kept, never acknowledged
                    const topicLen = body.readUInt16BE(0);
                    const topic = body.subarray(2, 2 + topicLen).toString('utf8');
                    const qos = (type >> 1) & 3;
                    const payload = body.subarray(2 + topicLen + (qos > 0 ? 2 : 0));
                    device.received.push({ topic, payload, dup: Boolean(type & 8) });
                    const waiter = device.waiters.shift();
                    if (waiter) waiter();
                }
            }
        });
    });
}

module.exports = { connectSilentDevice };
