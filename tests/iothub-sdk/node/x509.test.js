'use strict';
// X.509 devices with the official SDKs (docs/iothub.md, "X.509 devices"): registered with the
// service SDK's Registry (a self-signed device by its thumbprint, a CA-signed one as
// `certificateAuthority`, the CA given to the hub with --iothub-ca-file), then receiving C2D
// sent by the service SDK with the device SDK's MQTT, AMQP and HTTP transports, authenticated by
// a client certificate (connection string with `x509=true`, `setOptions({ cert, key })`); a
// certificate that is not the device's is refused on each transport. Certificates: openssl.

const { execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Client: ServiceClient, Registry } = require('azure-iothub');
const { Client: DeviceClient } = require('azure-iot-device');
const { Mqtt } = require('azure-iot-device-mqtt');
const { Amqp } = require('azure-iot-device-amqp');
const { Http } = require('azure-iot-device-http');
const { Message } = require('azure-iot-common');
const { startHub, within } = require('./hub');
const { assertNodeTrust } = require('./common');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mqstate-x509-'));

function openssl(...args) {
    execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A key and a self-signed certificate with subject CN `cn`: { cert, key } as PEM text. */
function selfSigned(name, cn) {
    const key = path.join(dir, `${name}.key`);
    const cert = path.join(dir, `${name}.pem`);
    openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
        '-subj', `/CN=${cn}`, '-keyout', key, '-out', cert);
    return { cert: fs.readFileSync(cert, 'utf8'), key: fs.readFileSync(key, 'utf8') };
}

/** A device certificate for `cn` signed by the CA `ca` (from `selfSigned` with CA extensions). */
function signedBy(ca, name, cn) {
    const key = path.join(dir, `${name}.key`);
    const csr = path.join(dir, `${name}.csr`);
    const cert = path.join(dir, `${name}.pem`);
    const ext = path.join(dir, `${name}.ext`);
    openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', `/CN=${cn}`,
        '-keyout', key, '-out', csr);
    fs.writeFileSync(ext, 'basicConstraints=critical,CA:FALSE\nextendedKeyUsage=clientAuth\n');
    openssl('x509', '-req', '-in', csr, '-CA', ca.certFile, '-CAkey', ca.keyFile, '-CAcreateserial', '-days', '2',
        '-extfile', ext, '-out', cert);
    return { cert: fs.readFileSync(cert, 'utf8'), key: fs.readFileSync(key, 'utf8') };
}

function makeCa(name) {
    const keyFile = path.join(dir, `${name}.key`);
    const certFile = path.join(dir, `${name}.pem`);
    openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
        '-subj', `/CN=${name}`, '-addext', 'basicConstraints=critical,CA:TRUE',
        '-addext', 'keyUsage=critical,keyCertSign,digitalSignature', '-keyout', keyFile, '-out', certFile);
    return { keyFile, certFile };
}

const ca = makeCa('x509-test-ca');
const otherCa = makeCa('x509-other-ca');
const TRANSPORTS = { Mqtt, Amqp, Http };

let hub;
let service;
let registry;
before(async () => {
    hub = await startHub({ name: 'node-x509', args: ['--iothub-ca-file', ca.certFile] });
    assertNodeTrust(hub);
    registry = Registry.fromConnectionString(hub.ownerConnectionString);
    service = ServiceClient.fromConnectionString(hub.serviceConnectionString);
    await within(20000, service.open(), 'service open');
});
after(async () => {
    if (service) await within(10000, service.close(), 'service close').catch(() => {});
    if (hub) await hub.stop();
    fs.rmSync(dir, { recursive: true, force: true });
});

/** An X.509 device client on `transport`, as the SDK's X.509 samples make one. */
function x509Client(id, credentials, transport) {
    const client = DeviceClient.fromConnectionString(`HostName=${hub.hostName};DeviceId=${id};x509=true`, TRANSPORTS[transport]);
    client.setOptions({ cert: credentials.cert, key: credentials.key });
    client.on('error', () => {});
    return client;
}

/** Opens, sends a C2D message with the service SDK, and returns its body as received. */
async function receiveOne(id, credentials, transport) {
    const client = x509Client(id, credentials, transport);
    if (transport === 'Http') client.setOptions({ http: { receivePolicy: { interval: 1 } } });
    try {
        const received = new Promise((resolve) => {
            client.on('message', (msg) => {
                client.complete(msg, () => resolve(msg.data.toString()));
            });
        });
        await within(20000, client.open(), `${transport} open of ${id}`);
        const msg = new Message(`to ${id} over ${transport}`);
        msg.messageId = `${id}-${transport}`;
        await within(20000, service.send(id, msg), 'service send');
        return await within(20000, received, `${transport} C2D message`);
    } finally {
        await within(10000, client.close(), 'device close').catch(() => {});
    }
}

test('X.509 devices register and receive C2D over MQTT, AMQP and HTTP; wrong certificates are refused', async () => {
    const own = selfSigned('self', 'x509-self');
    const signed = signedBy(ca, 'signed', 'x509-ca');
    // The SDK's X509 sample registers by thumbprint (SHA-1; Node's fingerprint has colons, as
    // the portal shows it).
    const thumbprint = new crypto.X509Certificate(own.cert).fingerprint;
    const created = await within(20000, registry.create({
        deviceId: 'x509-self',
        status: 'enabled',
        authentication: { x509Thumbprint: { primaryThumbprint: thumbprint } },
    }), 'registry create selfSigned');
    assert.equal(created.responseBody.authentication.type, 'selfSigned');
    assert.equal(created.responseBody.authentication.x509Thumbprint.primaryThumbprint, thumbprint.replace(/:/g, ''));
    const caDevice = await within(20000, registry.create({
        deviceId: 'x509-ca',
        authentication: { type: 'certificateAuthority' },
    }), 'registry create certificateAuthority');
    assert.equal(caDevice.responseBody.authentication.type, 'certificateAuthority');

    for (const transport of Object.keys(TRANSPORTS)) {
        assert.equal(await receiveOne('x509-self', own, transport), `to x509-self over ${transport}`);
        assert.equal(await receiveOne('x509-ca', signed, transport), `to x509-ca over ${transport}`);
    }

    const wrong = [
        ['x509-self', selfSigned('impostor', 'x509-self'), 'another self-signed certificate'],
        ['x509-ca', signedBy(otherCa, 'untrusted', 'x509-ca'), 'a certificate of another CA'],
        ['x509-ca', signedBy(ca, 'othercn', 'x509-self'), 'a CA-signed certificate for another device id'],
    ];
    for (const [id, credentials, what] of wrong) {
        for (const transport of Object.keys(TRANSPORTS)) {
            const client = x509Client(id, credentials, transport);
            if (transport === 'Mqtt') {
                // The CONNACK refuses it (code 5).
                await assert.rejects(within(30000, client.open(), 'MQTT open'),
                    (err) => /Unauthorized|not authorized/i.test(`${err.name} ${err.message}`), `MQTT, ${what}`);
            } else {
                // HTTP connects nothing and the AMQP transport attaches no link at open (no CBS
                // for X.509): the first request or link is refused (401, amqp:unauthorized-access).
                await within(30000, client.open(), `${transport} open`).catch(() => {});
                await assert.rejects(within(30000, client.sendEvent(new Message('x')), `${transport} send`),
                    (err) => /Unauthorized|unauthorized-access/i.test(`${err.name} ${err.message}`), `${transport}, ${what}`);
            }
            await within(10000, client.close(), 'device close').catch(() => {});
        }
    }
});
