// Domains in `allowOut` through the unmodified JS SDK: a sandbox allowed example.test with all
// other traffic denied reaches it by name over HTTP and HTTPS (HTTP judged by its Host header,
// HTTPS by its ClientHello's SNI) and no other name; `*.example.test` matches subdomains only; a
// name forged onto another server's address still reaches the named server only; and
// `updateNetwork` switches the allowed name of a running sandbox.
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { ALL_TRAFFIC } from 'e2b'

import { create, fetchFrom, internet, trust } from './probes.mjs'

// curl's exit codes when the domain proxy accepts a connection for a name it refuses and closes
// it: before any HTTP answer (52, "Empty reply from server"), or during the TLS handshake (35).
const NO_REPLY = 52
const NO_HANDSHAKE = 35

// A sandbox with these network rules, trusting the fake internet's CA.
async function trusting(t, network) {
  const sbx = await create(t, { network })
  await trust(sbx)
  return sbx
}

test('an allowed name goes through and no other', async (t) => {
  // The SDK's own form: denyOut as a function of its selector context.
  const sbx = await trusting(t, { allowOut: ['example.test'], denyOut: ({ allTraffic }) => [allTraffic] })
  for (const [url, tls] of [['http://example.test/', false], ['https://example.test/', true]]) {
    const echo = await fetchFrom(sbx, url)
    assert.deepEqual([echo.server, echo.host, echo.tls], [internet.http, 'example.test', tls])
  }
  assert.equal(await fetchFrom(sbx, 'http://other.test/'), NO_REPLY)
  assert.equal(await fetchFrom(sbx, 'https://other.test/'), NO_HANDSHAKE)
})

test('a forged name reaches the named server only', async (t) => {
  // curl sends example.test (SNI, Host) to other.test's address: the proxy dials example.test's
  // own address, never the one the client chose.
  const sbx = await trusting(t, { allowOut: ['example.test'], denyOut: [ALL_TRAFFIC] })
  for (const [url, port, tls] of [['https://example.test/', 443, true], ['http://example.test/', 80, false]]) {
    const forged = await fetchFrom(sbx, url, '--resolve', `example.test:${port}:${internet.other}`)
    assert.deepEqual([forged.server, forged.tls], [internet.http, tls])
  }
  // The other way round: an allowed address does not let another name through.
  const other = await fetchFrom(sbx, 'https://other.test/', '--resolve', `other.test:443:${internet.http}`)
  assert.equal(other, NO_HANDSHAKE)
})

test('wildcards match subdomains only', async (t) => {
  const sbx = await trusting(t, { allowOut: ['*.example.test'], denyOut: [ALL_TRAFFIC] })
  assert.equal((await fetchFrom(sbx, 'https://a.example.test/')).server, internet.sub)
  assert.equal((await fetchFrom(sbx, 'http://a.example.test/')).server, internet.sub)
  assert.equal(await fetchFrom(sbx, 'https://example.test/'), NO_HANDSHAKE)
  assert.equal(await fetchFrom(sbx, 'http://example.test/'), NO_REPLY)
})

test('updateNetwork switches the allowed name', async (t) => {
  const sbx = await trusting(t, { allowOut: ['example.test'], denyOut: [ALL_TRAFFIC] })
  assert.equal((await fetchFrom(sbx, 'https://example.test/')).server, internet.http)
  assert.equal(await fetchFrom(sbx, 'https://other.test/'), NO_HANDSHAKE)

  await sbx.updateNetwork({ allowOut: ['other.test'], denyOut: [ALL_TRAFFIC] })
  assert.equal((await fetchFrom(sbx, 'https://other.test/')).server, internet.other)
  assert.equal(await fetchFrom(sbx, 'https://example.test/'), NO_HANDSHAKE)
  assert.equal(await fetchFrom(sbx, 'http://example.test/'), NO_REPLY)

  await sbx.updateNetwork({}) // no rules: both names, as addressed, and nothing proxied
  assert.equal((await fetchFrom(sbx, 'https://example.test/')).server, internet.http)
  const addressed = await fetchFrom(sbx, 'http://example.test/', '--resolve', `example.test:80:${internet.other}`)
  assert.equal(addressed.server, internet.other)
})
