// Requests to a server in the sandbox through sandboxd's proxy, by the host `getHost()` gives, as
// the unmodified JS SDK sets a sandbox up: `allowPublicTraffic: false` asks for the sandbox's
// `trafficAccessToken` in `e2b-traffic-access-token` (403 without it or with another), and
// `maskRequestHost` is the Host the server sees.
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { create, get, inSandbox } from './probes.mjs'

const PORT = 8000
const ECHO_HOST = inSandbox('echo_host')
const TOKEN_HEADER = 'e2b-traffic-access-token'

// GET / of the sandbox's port PORT, sent to sandboxd by the sandbox's host name: to
// E2B_SANDBOX_URL with it as Host, or (E2B's domain mode) to https://HOST itself.
const throughProxy = (sbx, headers = {}) => {
  const host = sbx.getHost(PORT)
  const url = process.env.E2B_SANDBOX_URL ?? `https://${host}`
  return get(`${url}/`, { Host: host, ...headers })
}

// `check` run while the Host echo serves on PORT in the sandbox (a background command, killed
// afterwards), once it answers through the proxy (502 until it listens) with these headers.
async function whileServing(sbx, headers, check) {
  await sbx.files.write('/tmp/echo_host.py', ECHO_HOST)
  const server = await sbx.commands.run(`python3 /tmp/echo_host.py ${PORT}`, { background: true })
  try {
    await answering(sbx, headers)
    await check()
  } finally {
    await server.kill()
  }
}

async function answering(sbx, headers) {
  const deadline = Date.now() + 30_000
  while ((await throughProxy(sbx, headers)).status !== 200) {
    if (Date.now() > deadline) throw new Error("the sandbox's server did not answer in time")
    await new Promise((done) => setTimeout(done, 50))
  }
}

test('private traffic needs the token, and the host is masked', async (t) => {
  const network = { allowPublicTraffic: false, maskRequestHost: 'app.test:${PORT}' }
  const sbx = await create(t, { network })
  const token = sbx.trafficAccessToken
  assert.ok(token)
  const withToken = { [TOKEN_HEADER]: token }
  await whileServing(sbx, withToken, async () => {
    const answer = await throughProxy(sbx, withToken)
    assert.deepEqual(JSON.parse(answer.body), { host: `app.test:${PORT}` })
    assert.equal((await throughProxy(sbx)).status, 403)
    const wrong = { [TOKEN_HEADER]: token.split('').reverse().join('') }
    assert.equal((await throughProxy(sbx, wrong)).status, 403)
  })
})

test('public traffic by default keeps the host', async (t) => {
  const sbx = await create(t)
  assert.equal(sbx.trafficAccessToken, undefined)
  await whileServing(sbx, {}, async () => {
    const answer = await throughProxy(sbx)
    assert.deepEqual(JSON.parse(answer.body), { host: sbx.getHost(PORT) })
  })
})
